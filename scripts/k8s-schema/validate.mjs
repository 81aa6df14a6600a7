// Validates every object of the YAML streams named on the command line (kubectl kustomize's
// output) against its schema: Kubernetes' own (kubernetes-models), KEDA's and the Prometheus
// Operator's CRDs (@kubernetes-models/*). KServe publishes no such package: a ServingRuntime's
// containers are checked as core v1 Containers. An object of a kind with no schema here fails.
// Prints one line per object; exits 1 on the first stream with an invalid object.
import fs from "node:fs";
import { createRequire } from "node:module";
import yaml from "js-yaml";

const require = createRequire(import.meta.url);

// The package and path of the model class of (apiVersion, kind).
function modelPath(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  if (group === "keda.sh") return `@kubernetes-models/keda/${group}/${version}/${kind}`;
  if (group === "monitoring.coreos.com")
    return `@kubernetes-models/prometheus-operator/${group}/${version}/${kind}`;
  return group === "" ? `kubernetes-models/${version}/${kind}`
                      : `kubernetes-models/${group}/${version}/${kind}`;
}

function validate(object) {
  if (object.apiVersion === "serving.kserve.io/v1alpha1" && object.kind === "ServingRuntime") {
    const { IoK8sApiCoreV1Container: Container } =
        require("kubernetes-models/v1/Container");
    for (const c of object.spec?.containers ?? []) new Container(c).validate();
    if (!(object.spec?.containers ?? []).length) throw new Error("no containers");
    return;
  }
  let Model;
  try {
    Model = require(modelPath(object.apiVersion, object.kind))[object.kind];
  } catch (e) {
    throw new Error(`no schema for ${object.apiVersion} ${object.kind}`);
  }
  new Model(object).validate();
}

let failed = false;
for (const file of process.argv.slice(2)) {
  for (const object of yaml.loadAll(fs.readFileSync(file, "utf8"))) {
    if (!object) continue;
    const what = `${file}: ${object.kind} ${object.metadata?.name}`;
    try {
      validate(object);
      console.log(`ok    ${what}`);
    } catch (e) {
      failed = true;
      console.log(`FAIL  ${what}: ${e.message.slice(0, 2000)}`);
    }
  }
}
process.exit(failed ? 1 : 0);
