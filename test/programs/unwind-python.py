# Target for python3's native stacks: inner() calls os.getppid() (getppid() in libc) through
# middle() and outer().
#
#   python3 unwind-python.py N   calls os.getppid() N times that way, prints {"calls":N,"sum":S}
import json
import os
import sys


def inner(n):
    return os.getppid() + n


def middle(n):
    return inner(n) * 2


def outer(k):
    s = 0
    for i in range(k):
        s += middle(i)
    return s


n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
print(json.dumps({"calls": n, "sum": outer(n)}))
