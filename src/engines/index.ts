export * from './bpf/index.js';
export * from './inject/index.js';
export * from './ptrace/index.js';
export * from './tracefs/index.js';
