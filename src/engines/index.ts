export * from './bpf/index.js';
export * from './inject/index.js';
export * from './ptrace/index.js';
export { type RemovalNotice, setRemovalNotice } from './removal.js';
export * from './tracefs/index.js';
