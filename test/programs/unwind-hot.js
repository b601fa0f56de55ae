// Target for JIT frames (run with node --perf-basic-prof): hot() reads process.ppid (a call
// of getppid() in libc) often enough to be compiled; its frames are in JIT code.
//
//   node --perf-basic-prof unwind-hot.js N   prints {"calls":N*50,"sum":S}
function hot(n) {
  let s = 0;
  for (let i = 0; i < n; i++) s += process.ppid;
  return s;
}

function outerLoop(rounds) {
  let t = 0;
  for (let k = 0; k < rounds; k++) t += hot(50);
  return t;
}

const rounds = Number(process.argv[2] ?? 2000);
const sum = outerLoop(rounds);
console.log(JSON.stringify({ calls: rounds * 50, sum }));
