# A Python script whose list keeps growing: every round it appends 2,000 new strings of over
# 512 bytes (each its own malloc, past the small-object allocator; never freed while the list
# lives).
import sys
import time

kept = []


def grow_list(n):
    for i in range(n):
        kept.append("x" * (600 + i % 50) + str(i))


rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
for _ in range(rounds):
    grow_list(2000)
    time.sleep(0.4)
print("kept", len(kept))
