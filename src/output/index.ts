export { hex, renderJson, renderTable } from './json.js';
