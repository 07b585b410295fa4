"""Jobs for tests/test_forkserver.py: a forked child imports them by name, as it imports a trial's job."""

import os
import sys
import time


def report_twice(send, tag):
    send("epoch", {"pid": os.getpid(), "torch_preloaded": "torch" in sys.modules, "tag": tag})
    send("epoch", {"pid": os.getpid()})
    return {"tag": tag}


def fail(send):
    raise ValueError("batch_size 7 does not split")


def die(send):
    send("epoch", {"pid": os.getpid()})
    os._exit(3)


def hang(send, pid_file):
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
