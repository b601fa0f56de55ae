export * from './elf/index.js';
