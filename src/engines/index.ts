export * from './tracefs/index.js';
