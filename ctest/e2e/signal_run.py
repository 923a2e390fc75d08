#!/usr/bin/env python3
"""Runs a command the way a terminal runs a foreground job (its own session
and process group, SIGINT at its default action), waits until a rank's
telemetry file holds a number of step records, sends a signal to the whole
process group (what Ctrl-C does) or to the command alone, and exits with the
command's exit status, printing its output. Used by the bad-input table
(ctest/e2e/bad_input_faults.cpp) to test Ctrl-C and kill on scripts/launch.sh.

usage: signal_run.py TELEMETRY_FILE STEPS SIGNAL group|leader -- COMMAND...
"""
import os
import signal
import subprocess
import sys
import time


def steps_in(path):
    try:
        with open(path) as f:
            return sum(1 for line in f if '"type":"step"' in line)
    except OSError:
        return 0


def main():
    tel, steps, sig, target = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    cmd = sys.argv[sys.argv.index("--") + 1:]

    def child_setup():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.setsid()

    p = subprocess.Popen(cmd, preexec_fn=child_setup, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while steps_in(tel) < steps and p.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    signum = getattr(signal, "SIG" + sig)
    if p.poll() is None:
        print(f"signal_run.py: sending SIG{sig} to the {target}", flush=True)
        if target == "group":
            os.killpg(p.pid, signum)
        else:
            p.send_signal(signum)
    out, _ = p.communicate(timeout=300)
    sys.stdout.write(out.decode(errors="replace"))
    sys.exit(p.returncode if p.returncode >= 0 else 128 - p.returncode)


if __name__ == "__main__":
    main()
