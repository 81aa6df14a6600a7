"""What the benches read of running seqpipe processes from /proc: their resident memory."""
import os


def rss_by_process(marker):
    """{pid: (program, RSS bytes)} of the processes whose command line contains `marker` (a
    pipeline's run directory names its processes)."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if marker.encode() not in b" ".join(argv) or not argv[0]:
                continue
            with open(f"/proc/{pid}/status") as f:
                rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue  # gone meanwhile, or a kernel thread
        out[int(pid)] = (os.path.basename(argv[0].decode()), rss_kib * 1024)
    return out


def rss_by_program(marker, programs):
    """{program: RSS bytes} of those of `programs` whose command line contains `marker` (one
    process each)."""
    return {program: rss for program, rss in rss_by_process(marker).values() if program in programs}
