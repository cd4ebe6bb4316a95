/**
 * The image manifest: what an image holds and where its bytes are.
 *
 * On disk (`<image>/manifest`) it is a fixed 48-byte header followed by a
 * msgpack payload:
 *
 *   offset  size  field
 *        0     8  magic "GPUCKPT\0"
 *        8     4  format version, u32 LE (FORMAT_VERSION)
 *       12     4  payload length in bytes, u32 LE
 *       16    32  SHA-256 of the payload
 *       48     n  payload: msgpack map (see `Manifest`)
 *
 * The header is checked before anything is decoded, in an order chosen so the
 * error names the real problem: magic (is this ours at all?), then version (a
 * newer gpuckpt may lay out everything after it differently, so nothing past
 * it is trusted), then length (truncated?), then the hash (bit rot, partial
 * overwrite), and only then is the payload decoded and validated.
 */
import { createHash } from 'node:crypto';
// msgpackr's main entry loads its native string extractor (msgpackr-extract),
// half of its 40 ms import and nothing for a manifest of a few kB.
import { Packr } from 'msgpackr/pack';
import { GpuckptError } from '../base/errors.js';
import { checkManifest } from './manifest-check.js';
import type { Manifest } from './manifest-types.js';
import {
  FORMAT_VERSION,
  MANIFEST_HEADER_LENGTH,
  MANIFEST_MAGIC,
  MAX_MANIFEST_PAYLOAD,
  OLDEST_FORMAT_VERSION,
} from './format.js';

export {
  DATA_FILE,
  FORMAT_VERSION,
  MANIFEST_FILE,
  MANIFEST_HEADER_LENGTH,
  MANIFEST_MAGIC,
  MAX_FRAME_LENGTH,
  MAX_MANIFEST_PAYLOAD,
} from './format.js';


// useRecords:false keeps the payload plain msgpack maps (readable by any msgpack
// tool, no shared-structure state). Addresses and sizes are BigInt: msgpackr
// always writes a BigInt as a 64-bit int, and int64AsType:'bigint' reads every
// 64-bit int back as BigInt, so they round-trip exactly, while small JS numbers
// stay numbers. largeBigIntToFloat:false makes an out-of-range BigInt an error
// instead of a silently rounded float. One instance per thread (module state).
const packr = new Packr({
  useRecords: false,
  mapsAsObjects: true,
  int64AsType: 'bigint',
  largeBigIntToFloat: false,
  largeBigIntToString: false,
  useBigIntExtension: false,
  moreTypes: false,
  bundleStrings: false,
});

/**
 * Serialize a manifest (header + payload). The manifest is validated first:
 * writing an image that every reader would refuse is a bug in the caller.
 */
export function encodeManifest(m: Manifest): Buffer {
  const check = checkManifest(m);
  if (!check.ok) {
    throw new GpuckptError('INTERNAL', `refusing to write an invalid image manifest: ${check.problem}`);
  }
  // Encode the checked copy: it has exactly the schema's fields, nothing else.
  const payload = packr.pack(check.manifest);
  if (payload.length > MAX_MANIFEST_PAYLOAD) {
    throw new GpuckptError('INTERNAL', `image manifest would be ${payload.length} bytes, over the ${MAX_MANIFEST_PAYLOAD}-byte limit`);
  }
  const header = Buffer.alloc(MANIFEST_HEADER_LENGTH);
  MANIFEST_MAGIC.copy(header, 0);
  header.writeUInt32LE(FORMAT_VERSION, 8);
  header.writeUInt32LE(payload.length, 12);
  sha256(payload).copy(header, 16);
  return Buffer.concat([header, payload]);
}

/**
 * Parse and check a manifest file's bytes. `pathForMessages` only names the
 * file in errors. Throws GpuckptError with:
 * - IMAGE_NOT_AN_IMAGE: the magic is wrong (not a gpuckpt manifest),
 * - IMAGE_VERSION: a format version this gpuckpt does not read,
 * - IMAGE_TRUNCATED: empty, or shorter than the header / declared payload,
 * - IMAGE_CORRUPT: hash mismatch, trailing bytes, undecodable or invalid payload.
 */
export function decodeManifest(buf: Uint8Array, pathForMessages: string): Manifest {
  const what = `image manifest ${pathForMessages}`;
  const bytes = Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);

  if (bytes.length === 0) {
    throw new GpuckptError('IMAGE_TRUNCATED', `${what} is empty`);
  }
  // A short file whose bytes are a prefix of the magic is a cut-off manifest,
  // anything else in those bytes means the file is not ours.
  const magicLen = Math.min(bytes.length, MANIFEST_MAGIC.length);
  if (!bytes.subarray(0, magicLen).equals(MANIFEST_MAGIC.subarray(0, magicLen))) {
    throw new GpuckptError('IMAGE_NOT_AN_IMAGE', `${what} is not a gpuckpt manifest (bad magic)`);
  }
  if (bytes.length >= 12) {
    const version = bytes.readUInt32LE(8);
    if (version < OLDEST_FORMAT_VERSION || version > FORMAT_VERSION) {
      throw new GpuckptError(
        'IMAGE_VERSION',
        `${what} has image format version ${version}; this gpuckpt reads versions ${OLDEST_FORMAT_VERSION} to ${FORMAT_VERSION}`,
      );
    }
  }
  if (bytes.length < MANIFEST_HEADER_LENGTH) {
    throw new GpuckptError(
      'IMAGE_TRUNCATED',
      `${what} is truncated: ${bytes.length} bytes, shorter than its ${MANIFEST_HEADER_LENGTH}-byte header`,
    );
  }
  const payloadLength = bytes.readUInt32LE(12);
  if (payloadLength > MAX_MANIFEST_PAYLOAD) {
    throw new GpuckptError('IMAGE_CORRUPT', `${what} is corrupt: header claims a ${payloadLength}-byte payload`);
  }
  const available = bytes.length - MANIFEST_HEADER_LENGTH;
  if (available < payloadLength) {
    throw new GpuckptError(
      'IMAGE_TRUNCATED',
      `${what} is truncated: payload has ${available} of ${payloadLength} bytes`,
    );
  }
  if (available > payloadLength) {
    throw new GpuckptError(
      'IMAGE_CORRUPT',
      `${what} is corrupt: ${available - payloadLength} unexpected bytes after the payload`,
    );
  }
  const payload = bytes.subarray(MANIFEST_HEADER_LENGTH);
  if (!sha256(payload).equals(bytes.subarray(16, 48))) {
    throw new GpuckptError('IMAGE_CORRUPT', `${what} is corrupt: SHA-256 of the payload does not match its header`);
  }

  let decoded: unknown;
  try {
    decoded = packr.unpack(payload);
  } catch (e) {
    throw new GpuckptError('IMAGE_CORRUPT', `${what} is corrupt: payload is not valid msgpack (${(e as Error).message})`, {
      cause: e,
    });
  }
  const check = checkManifest(decoded);
  if (!check.ok) {
    throw new GpuckptError('IMAGE_CORRUPT', `${what} is corrupt: ${check.problem}`);
  }
  return check.manifest;
}

function sha256(data: Uint8Array): Buffer {
  return createHash('sha256').update(data).digest();
}
