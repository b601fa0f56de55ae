// One run of bench/programs/hot.c under AsyncProcessTracer (the tracer on a worker thread, the
// handler in this thread): `node bench/async-hit.mjs BIN N`. The program prints its own timing.
import { AsyncProcessTracer } from '../dist/api/index.js';

const [bin, n] = process.argv.slice(2);
const tracer = await AsyncProcessTracer.spawn([bin, n]);
let hits = 0;
await tracer.register({
  id: 'hot',
  event: 'breakpoint',
  where: `${bin}:hot_function`,
  handler: () => {
    hits++;
  },
});
await tracer.poll();
await tracer.detach();
if (hits !== Number(n)) throw new Error(`${hits} hits for ${n} calls`);
