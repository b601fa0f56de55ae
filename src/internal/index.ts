export { grouped } from './grouped.js';
export { interned } from './interned.js';
export { closest, didYouMean, levenshtein } from './suggest.js';
