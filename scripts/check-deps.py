#!/usr/bin/env python3
"""Every file a build used from outside the tree must come from scripts/debian-packages.txt.

Reads what the build in BUILD_DIR used: the headers of every object (ninja's deps log), the
libraries of every link (the link lines, -lNAME resolved as the linker does, and ldd of what was
linked), the CMake files CMake read (build.ninja's re-run dependencies), the pkg-config files
pkg_check_modules read and the compiler and tools CMake found. Each file outside the source and
build trees must belong to a Debian package in the Depends closure (Pre-Depends and Depends,
recursively; Recommends and Suggests are not installed by scripts/install-deps.sh) of the listed
packages. A package that is here only by chance (installed by hand, or recommended by another)
is exactly what a fresh machine lacks, so the check fails naming each such file and its package.

  scripts/check-deps.sh [--build-dir DIR] [--packages FILE] [--verbose]
  scripts/check-deps.sh --self-test [--build-dir DIR]
      checks that the check fails, naming both, on a copy of the list without libzmq3-dev and
      cppzmq-dev (what every service includes): a check that cannot fail proves nothing.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The CUDA toolkit is NVIDIA's installer's, not a Debian package on the machines that have one;
# a CUDA build may use it and stays outside this check.
ALLOWED_PREFIXES = ("/usr/local/cuda",)
SELF_TEST_REMOVED = ("libzmq3-dev", "cppzmq-dev")


def run(args, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, **kwargs)


def read_list(path):
    """The listed lines, each as its alternatives ("a | b": a, or b where it is installed)."""
    with open(path) as f:
        lines = [line.strip() for line in f if line.strip() and not line.strip().startswith("#")]
    return [[p.strip() for p in line.split("|")] for line in lines]


def chosen(listed, packages):
    """Each line's first installed alternative, or None for a line with none installed."""
    return [next((p for p in line if p in packages), None) for line in listed]


def headers(build):
    """The headers of every object, from ninja's deps log (paths relative to the build dir)."""
    out = run(["ninja", "-C", build, "-t", "deps"], check=True).stdout
    return {line.strip() for line in out.splitlines() if line.startswith(" ") and line.strip()}


def library_search_dirs():
    out = run(["c++", "-print-search-dirs"], check=True).stdout
    for line in out.splitlines():
        if line.startswith("libraries: ="):
            return [d for d in line[len("libraries: ="):].split(":") if d]
    return []


def find_library(name, dirs, static):
    for d in dirs:
        for suffix in ((".a",) if static else (".so", ".a")):
            candidate = os.path.join(d, "lib" + name + suffix)
            if os.path.exists(candidate):
                return os.path.normpath(candidate)
    return None


def libraries(build):
    """The libraries named on every link line, and what the linked files load at run time."""
    out = run(["ninja", "-C", build, "-t", "commands"], check=True).stdout
    default_dirs = library_search_dirs()
    used, outputs, unresolved = set(), [], []
    for line in out.splitlines():
        # A link: the compiler producing a file without -c (archives are made by ar from objects).
        if " -o " not in line or " -c " in line or "/ar " in line:
            continue
        # "cd DIR && command": the command's part, relative paths from DIR.
        cwd = build
        m = re.match(r"cd (\S+) && (.*)", line)
        if m:
            cwd, line = m.group(1), m.group(2)
        tokens = shlex.split(line)
        dirs = [t[2:] for t in tokens if t.startswith("-L")] + default_dirs
        static = False
        for i, t in enumerate(tokens):
            if t in ("-Wl,-Bstatic", "-static"):
                static = True
            elif t == "-Wl,-Bdynamic":
                static = False
            if i > 0 and tokens[i - 1] == "-o":
                outputs.append(os.path.join(cwd, t))
            elif t.startswith("-l") and len(t) > 2:
                found = find_library(t[2:], dirs, static)
                if found:
                    used.add(found)
                else:
                    unresolved.append(t)
            elif re.search(r"\.(a|so(\.[0-9]+)*)$", t) and not t.startswith("-"):
                used.add(os.path.join(cwd, t))
    for output in outputs:
        if not os.path.exists(output):
            continue
        for line in run(["ldd", output]).stdout.splitlines():
            m = re.search(r"=> (/\S+)", line) or re.match(r"\s*(/\S+)", line)
            if m:
                used.add(m.group(1))
    return used, unresolved


def cmake_files(build):
    """The CMake files CMake read: build.ninja re-runs CMake when any of them changes."""
    with open(os.path.join(build, "build.ninja")) as f:
        text = f.read().replace("$\n", " ")
    m = re.search(r"^build build\.ninja: RERUN_CMAKE \|(.*)$", text, re.M)
    return set(shlex.split(m.group(1))) if m else set()


def cmake_cache(build):
    cache = {}
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        for line in f:
            m = re.match(r"([^#/][^:=]*):[A-Z]+=(.*)$", line.rstrip("\n"))
            if m:
                cache[m.group(1)] = m.group(2)
    return cache


def cmake_tools_and_pkgconfig(build):
    """The compiler and tools CMake found, and the .pc files of the modules pkg-config found."""
    cache = cmake_cache(build)
    used = set()
    for key in ("CMAKE_CXX_COMPILER", "CMAKE_AR", "CMAKE_LINKER", "CMAKE_MAKE_PROGRAM",
                "CMAKE_COMMAND", "PKG_CONFIG_EXECUTABLE"):
        if cache.get(key, "").startswith("/"):
            used.add(cache[key])
    modules = []
    for key, value in cache.items():
        m = re.match(r"__pkg_config_arguments_(.*)$", key)
        if m and cache.get(m.group(1) + "_FOUND") == "1":
            keywords = {"REQUIRED", "QUIET", "IMPORTED_TARGET", "GLOBAL", "NO_CMAKE_PATH",
                        "NO_CMAKE_ENVIRONMENT_PATH"}
            modules += [re.split(r"[<>=]", a)[0] for a in value.split(";") if a not in keywords]
    for module in modules:
        path = run(["pkg-config", "--path", module]).stdout.strip()
        if path:
            used.add(path)
    return used


def usrmerge_aliases(path):
    """Debian 12 merges /lib into /usr/lib: dpkg knows a file by the name its package ships."""
    for top in ("/lib", "/lib64", "/bin", "/sbin"):
        if path.startswith(top + "/"):
            return [path, "/usr" + path]
        if path.startswith("/usr" + top + "/"):
            return [path, path[len("/usr"):]]
    return [path]


def owners(paths):
    """dpkg's owners of each path, in one dpkg-query call: {path: [packages]}."""
    found = {}
    if not paths:
        return found
    out = run(["dpkg-query", "-S", *sorted(paths)]).stdout
    for line in out.splitlines():
        if line.startswith("diversion by"):
            continue
        packages, _, path = line.partition(": ")
        if path in paths:
            found.setdefault(path, []).extend(p.strip().split(":")[0] for p in packages.split(","))
    return found


def package_of_each(files):
    """{file: [packages] or None}: the file as named, else as its symlinks resolve."""
    named = {f: usrmerge_aliases(f) for f in files}
    resolved = {f: usrmerge_aliases(os.path.realpath(f)) for f in files}
    known = owners({p for f in files for p in named[f] + resolved[f]})
    result = {}
    for f in files:
        result[f] = None
        for candidates in (named[f], resolved[f]):
            packages = sorted({p for c in candidates for p in known.get(c, [])})
            if packages:
                result[f] = packages
                break
    return result


def installed_packages():
    """{package: (depends, provides)} of every installed package, and the Essential ones."""
    out = run(["dpkg-query", "-W", "-f=${Package}\t${db:Status-Abbrev}\t${Essential}\t"
               "${Pre-Depends}, ${Depends}\t${Provides}\n"], check=True).stdout
    packages, essential, providers = {}, [], {}
    for line in out.splitlines():
        name, status, is_essential, depends, provides = line.split("\t")
        if not status.startswith("ii"):
            continue
        packages[name] = depends
        if is_essential == "yes":
            essential.append(name)
        for p in provides.split(","):
            if p.strip():
                providers.setdefault(p.strip().split(" ")[0].split(":")[0], []).append(name)
    return packages, essential, providers


def closure(roots, packages, providers):
    seen, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for group in packages[p].split(","):
            # "a (>= 1) | b": the first alternative an installed package satisfies, itself or
            # through its Provides (a virtual package).
            for alternative in group.split("|"):
                name = alternative.strip().split(" ")[0].split(":")[0]
                satisfied = ([name] if name in packages else []) + providers.get(name, [])
                if satisfied:
                    todo.extend(satisfied)
                    break
    return seen


def check(build, package_list, verbose, out=sys.stdout):
    """Returns the packages outside the closure that the build used ({package: [files]})."""
    build = os.path.realpath(build)
    if not os.path.exists(os.path.join(build, ".ninja_deps")):
        print(f"check-deps: {build} has no ninja deps log: build it first", file=out)
        return None
    header_files = headers(build)
    library_files, unresolved = libraries(build)
    cmake = cmake_files(build)
    tools = cmake_tools_and_pkgconfig(build)
    # The tree the build was configured from, which need not be this script's.
    tree = cmake_cache(build).get("CMAKE_HOME_DIRECTORY", ROOT)
    used = set()
    for f in header_files | library_files | cmake | tools:
        path = os.path.normpath(os.path.join(build, f))
        if path.startswith((tree + "/", build + "/")) or path.startswith(ALLOWED_PREFIXES):
            continue
        used.add(path)
    owned = package_of_each(used)

    listed = read_list(package_list)
    packages, essential, providers = installed_packages()
    roots = chosen(listed, packages)
    absent = [" | ".join(line) for line, p in zip(listed, roots) if p is None]
    if absent:
        print(f"check-deps: not installed here: {' '.join(absent)} (scripts/install-deps.sh)",
              file=out)
        return None
    # Essential packages are on every Debian system and no package declares a dependency on them.
    allowed = closure(roots + essential, packages, providers)

    outside, unowned = {}, []
    for f in sorted(used):
        if owned[f] is None:
            unowned.append(f)
        elif not set(owned[f]) & allowed:
            outside.setdefault(owned[f][0], []).append(f)
    name = os.path.relpath(package_list, ROOT) if package_list.startswith(ROOT) else package_list
    print(f"check-deps: {len(used)} files from outside the tree ({len(header_files)} headers, "
          f"{len(library_files)} libraries, {len(cmake)} CMake files, {len(tools)} tools and "
          f".pc files, before dropping the tree's own); {len(allowed)} packages in the Depends "
          f"closure of {name}'s {len(listed)}", file=out)
    for f in unresolved:
        print(f"check-deps: the linker option {f} names no library in the search path", file=out)
    for package, files in sorted(outside.items()):
        print(f"check-deps: {package}: add {package} to scripts/debian-packages.txt; "
              f"the build used {len(files)} of its files:", file=out)
        shown = files if verbose else files[:8]
        for f in shown:
            print(f"  {f}  ({package})", file=out)
        if len(files) > len(shown):
            print(f"  ... and {len(files) - len(shown)} more (--verbose lists them)", file=out)
    for f in unowned:
        print(f"check-deps: {f}: no Debian package owns it (installed by hand?)", file=out)
    if outside or unowned or unresolved:
        print(f"check-deps: FAILED: {len(outside)} packages outside the list's closure, "
              f"{len(unowned)} files no package owns", file=out)
        return dict(outside, **{f: [f] for f in unowned + unresolved})
    print("check-deps: ok: every file comes from the list's Depends closure", file=out)
    return {}


def self_test(build):
    listed = os.path.join(ROOT, "scripts", "debian-packages.txt")
    with tempfile.NamedTemporaryFile("w", prefix="debian-packages-", suffix=".txt") as reduced:
        with open(listed) as f:
            reduced.write("".join(l for l in f if l.strip() not in SELF_TEST_REMOVED))
        reduced.flush()
        print(f"check-deps: self-test: the list without {' and '.join(SELF_TEST_REMOVED)}")
        missing = check(build, reduced.name, verbose=False)
    if missing is None:
        return 2
    if set(SELF_TEST_REMOVED) <= set(missing):
        print(f"check-deps: self-test passed: the check failed and named "
              f"{' and '.join(SELF_TEST_REMOVED)}")
        return 0
    print(f"check-deps: self-test FAILED: the check did not name {' and '.join(SELF_TEST_REMOVED)}")
    return 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build", "release"))
    parser.add_argument("--packages", default=os.path.join(ROOT, "scripts", "debian-packages.txt"))
    parser.add_argument("--verbose", action="store_true", help="list every file")
    parser.add_argument("--self-test", action="store_true",
                        help="show that a list without the ZeroMQ packages fails")
    args = parser.parse_args()
    if args.self_test:
        return self_test(args.build_dir)
    missing = check(args.build_dir, os.path.abspath(args.packages), args.verbose)
    return 2 if missing is None else (1 if missing else 0)


if __name__ == "__main__":
    sys.exit(main())
