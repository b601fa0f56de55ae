// x86-64 is the only architecture upscope supports; its API is the arch API.
export * from './x86-64/index.js';
