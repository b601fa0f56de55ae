import { BPF_MAP_CREATE_ATTR } from './constants.js';

export interface MapCreateSpec {
  readonly mapType: number;
  readonly keySizeBytes: number;
  readonly valueSizeBytes: number;
  readonly maxEntries: number;
  readonly flags?: number;
  /** Up to 15 characters: [A-Za-z0-9_.]. */
  readonly name?: string;
}

/** The bytes of `union bpf_attr` for BPF_MAP_CREATE. */
export function mapCreateAttr(spec: MapCreateSpec): Uint8Array {
  const attr = new Uint8Array(BPF_MAP_CREATE_ATTR.sizeBytes);
  const view = new DataView(attr.buffer);
  view.setUint32(BPF_MAP_CREATE_ATTR.map_type, spec.mapType, true);
  view.setUint32(BPF_MAP_CREATE_ATTR.key_size, spec.keySizeBytes, true);
  view.setUint32(BPF_MAP_CREATE_ATTR.value_size, spec.valueSizeBytes, true);
  view.setUint32(BPF_MAP_CREATE_ATTR.max_entries, spec.maxEntries, true);
  view.setUint32(BPF_MAP_CREATE_ATTR.map_flags, spec.flags ?? 0, true);
  const name = new TextEncoder().encode((spec.name ?? '').slice(0, 15));
  attr.set(name, BPF_MAP_CREATE_ATTR.map_name);
  return attr;
}
