/**
 * A manifest file built straight from the format spec (header, SHA-256,
 * msgpack payload), independently of controller/image/manifest.ts, so tests
 * can write any payload, valid or not, with a correct hash.
 */
import { createHash } from 'node:crypto';
import { Packr } from 'msgpackr';

const packr = new Packr({ useRecords: false, mapsAsObjects: true, int64AsType: 'bigint', largeBigIntToFloat: false, moreTypes: false });

export function encodeBySpec(payload: unknown, version = 1): Buffer {
  const body = packr.pack(payload);
  const header = Buffer.alloc(48);
  header.write('GPUCKPT\0', 0, 'latin1');
  header.writeUInt32LE(version, 8);
  header.writeUInt32LE(body.length, 12);
  createHash('sha256').update(body).digest().copy(header, 16);
  return Buffer.concat([header, body]);
}

/** The payload of a manifest file, decoded the way the spec says. */
export function decodeBySpec(file: Buffer): any {
  return packr.unpack(file.subarray(48));
}
