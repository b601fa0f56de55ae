# A Python script whose list keeps growing, a round at a time: each round appends 2,000 new
# strings of over 512 bytes (each its own malloc, past the small-object allocator; kept while
# the list lives), then says how many strings it keeps and their bytes (sys.getsizeof, which
# is what it asked malloc for), and waits for a line on stdin before the next round (at the
# end of its input it goes on at once).
#
#   leaks-grow.py [ROUNDS]   prints "round R kept N bytes B" per round, then "kept N"
import sys

kept = []


def grow_list(n):
    for i in range(n):
        kept.append("x" * (600 + i % 50) + str(i))


rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
total = 0
for r in range(rounds):
    before = len(kept)
    grow_list(2000)
    total += sum(sys.getsizeof(s) for s in kept[before:])
    print(f"round {r + 1} kept {len(kept)} bytes {total}", flush=True)
    sys.stdin.readline()
print("kept", len(kept), flush=True)
