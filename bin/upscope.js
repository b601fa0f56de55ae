#!/usr/bin/env node
// The `upscope` command. The TypeScript sources are compiled to dist/ by `npm ci` (prepare).
import { main } from '../dist/cli/main.js';

main(process.argv.slice(2)).then((status) => {
  process.exitCode = status;
});
