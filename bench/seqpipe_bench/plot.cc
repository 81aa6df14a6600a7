#include "plot.h"

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "seqpipe/cli/cli.h"

namespace seqpipe::bench {

namespace {

// gnuplot reads file names and titles inside double quotes: refuse what would break out of them.
std::string quoted(const std::string& text) {
  if (text.find_first_of("\"\\\n") != std::string::npos) {
    throw cli::UsageError("file names with quotes, backslashes or newlines cannot be plotted: '" +
                          text + "'");
  }
  return "\"" + text + "\"";
}

std::string script(const std::vector<std::string>& csvs, const std::string& png) {
  const size_t panels = 1 + csvs.size();
  std::string s;
  s += "set terminal pngcairo size " + std::to_string(520 * panels) + ",420 font \"sans,9\"\n";
  s += "set output " + quoted(png) + "\n";
  s += "set datafile separator ','\nset datafile columnheaders\n";
  s += "set multiplot layout 1," + std::to_string(panels) + "\n";
  // Panel 1: latency against throughput, the classic perf_analyzer curve, one line per file.
  // Log scale: configurations that differ by 10x in latency stay readable side by side.
  s += "set title 'latency vs throughput'\nset xlabel 'ok replies / s'\nset ylabel 'latency (ms, "
       "log scale)'\n"
       "set logscale y\nset key top left\nset grid\n";
  s += "plot ";
  for (size_t i = 0; i < csvs.size(); ++i) {
    const std::string name = quoted(std::filesystem::path(csvs[i]).stem().string());
    if (i > 0) s += ", ";
    s += quoted(csvs[i]) +
         " using (column(\"Inferences/Second\")):(column(\"p99 latency\")/1000.0) with linespoints "
         "lw 2 lc " +
         std::to_string(i + 1) + " pt 7 title " + name + ".' p99', ";
    s += quoted(csvs[i]) +
         " using (column(\"Inferences/Second\")):(column(\"p50 latency\")/1000.0) with linespoints "
         "dt 2 lc " +
         std::to_string(i + 1) + " pt 6 title " + name + ".' p50'";
  }
  s += "\n";
  // One panel per file: where a request's time goes, per step (mean ms, stacked).
  s += "unset grid\nunset logscale y\nset style data histograms\nset style histogram "
       "rowstacked\nset style fill solid 0.8 border -1\n"
       "set boxwidth 0.7\nset xtics rotate by -35\nset xlabel ''\nset ylabel 'mean ms per "
       "request'\nset key top left\n";
  for (const std::string& csv : csvs) {
    s += "set title " + quoted(std::filesystem::path(csv).stem().string() + ": per-stage time") +
         "\n";
    const std::string f = quoted(csv);
    s += "plot " + f +
         " using (column(\"Queue\")/1000.0):xtic(stringcolumn(\"Label\")) title 'queue', " + f +
         " using ((column(\"Tokenize\")+column(\"Postprocess\"))/1000.0) title "
         "'tokenize+postprocess', " +
         f + " using (column(\"Batch Wait\")/1000.0) title 'batch wait', " + f +
         " using (column(\"Encode\")/1000.0) title 'encode', " + f +
         " using (column(\"Decode\")/1000.0) title 'decode', " + f +
         " using ((column(\"Network+Server Send/Recv\")+column(\"Client Send\"))/1000.0) title "
         "'overhead'\n";
  }
  s += "unset multiplot\n";
  return s;
}

}  // namespace

int plot_main(int argc, char** argv) {
  std::vector<std::string> files;
  bool help = false;
  CLI::App app;
  cli::set_up(app);
  app.add_flag("-h,--help", help);
  app.add_option("FILE", files);
  const std::vector<std::string> unknown = cli::parse(app, argc, argv);
  if (help) {
    std::cout << "usage: seqpipe-bench plot FILE.csv [FILE.csv ...] OUT.png  (see seqpipe-bench "
                 "--help)\n";
    return 0;
  }
  if (!unknown.empty()) throw cli::UsageError("plot: unknown option '" + unknown.front() + "'");
  if (files.size() < 2) throw cli::UsageError("plot needs FILE.csv [FILE.csv ...] OUT.png");
  const std::string png = files.back();
  files.pop_back();
  if (std::filesystem::path(png).extension() != ".png")
    throw cli::UsageError("plot: the output must be a .png, got '" + png + "'");
  for (const std::string& csv : files) {
    if (!std::filesystem::exists(csv)) throw cli::UsageError("plot: no such file '" + csv + "'");
  }
  const std::string text = script(files, png);
  std::FILE* gnuplot = ::popen("gnuplot", "w");
  if (gnuplot == nullptr)
    throw std::runtime_error("cannot run gnuplot (Debian package gnuplot-nox)");
  std::fwrite(text.data(), 1, text.size(), gnuplot);
  const int status = ::pclose(gnuplot);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error(WIFEXITED(status) && WEXITSTATUS(status) == 127
                                 ? "cannot run gnuplot (install the Debian package gnuplot-nox)"
                                 : "gnuplot failed (its message is above)");
  }
  std::printf("wrote %s\n", png.c_str());
  return 0;
}

}  // namespace seqpipe::bench
