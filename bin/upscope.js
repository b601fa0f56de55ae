#!/usr/bin/env node
// The `upscope` command. The TypeScript sources are compiled and bundled into dist/cli.mjs by `npm ci` (prepare).
import { main } from '../dist/cli.mjs';

main(process.argv.slice(2)).then((status) => {
  process.exitCode = status;
});
