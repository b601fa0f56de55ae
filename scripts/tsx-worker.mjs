// Runs a worker module from TypeScript source (tests, `tsx`): `node --import tsx` registers
// tsx in the main thread only, so the worker registers it before importing its module.
import { workerData } from 'node:worker_threads';
import { register } from 'tsx/esm/api';

register();
await import(workerData.entry);
