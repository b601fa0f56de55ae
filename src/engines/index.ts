export * from './ptrace/index.js';
export * from './tracefs/index.js';
