// The coexist-loop programs (test/programs/coexist-loop.{cpp,rs,go}) in C++ (exceptions pass
// through its probed function), Rust and Go: each prints "ready PID", calls its function
// until a STOP file exists, then prints "calls N" (C++: "calls N thrown T").
import { compileProgram } from './compile.js';
import { compileGo, findGo } from './go.js';
import { compileRust, findRustc } from './rustc.js';

export const COEXIST_TARGETS = [
  {
    language: 'C++',
    build: () => compileProgram('coexist-loop', { flags: ['-O2'] }),
    fn: 'app::step',
    probe: 'app::step(long)',
    needs: ['g++'],
  },
  {
    language: 'Rust',
    build: () => compileRust(findRustc()!, 'coexist-loop', ['-C', 'opt-level=2']),
    fn: 'coexist_step',
    probe: 'coexist_step',
    needs: [],
  },
  {
    language: 'Go',
    build: () => compileGo(findGo()!, 'coexist-loop'),
    fn: 'main.step',
    probe: 'main.step',
    needs: ['go'],
  },
] as const;
