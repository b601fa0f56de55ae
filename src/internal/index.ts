export { closest, didYouMean, levenshtein } from './suggest.js';
