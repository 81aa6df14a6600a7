#pragma once
// `seqpipe-bench plot`: draws seqpipe-bench CSV files with gnuplot.
namespace seqpipe::bench {

// argv: "plot", FILE.csv [FILE.csv ...], OUT.png. Returns the exit status.
int plot_main(int argc, char** argv);

}  // namespace seqpipe::bench
