/**
 * Constants of the on-disk image format. Kept apart from the manifest code so
 * that every image module can share them without import cycles.
 */

/** Name of the manifest file inside an image directory. */
export const MANIFEST_FILE = 'manifest';
/** Name of the file of concatenated zstd frames inside an image directory. */
export const DATA_FILE = 'pool.zst';
/**
 * Bump whenever a reader of the previous version would misread a new image.
 * 2: the blocks of an allocation whose digest is 0 (all zeros) may be in no
 * frame; they are zeros. A version 1 image is a version 2 image that left
 * none out, so both are read.
 * 3: a frame may hold its raw bytes as byte planes (FrameRecord.planes),
 * put back into elements after decompression.
 * 4: ranges the framework held unused (Manifest.unused) are in no frame, and
 * a restore leaves them as they are.
 * 5: a frame's data may be several zstd frames end to end (byte planes: one
 * per plane, a plane that does not compress in raw blocks), read as one.
 */
export const FORMAT_VERSION = 5;
/** The first version that may leave unused ranges out. */
export const UNUSED_FORMAT_VERSION = 4;
/** The first version whose frames may hold byte planes. */
export const PLANES_FORMAT_VERSION = 3;
/** The first version whose frames of planes may be a zstd frame per plane. */
export const PLANE_FRAMES_FORMAT_VERSION = 5;
/** The oldest format version this gpuckpt reads. */
export const OLDEST_FORMAT_VERSION = 1;
export const MANIFEST_MAGIC: Buffer = Buffer.from('GPUCKPT\0', 'latin1');
/** magic(8) + version(4) + payload length(4) + SHA-256(32). */
export const MANIFEST_HEADER_LENGTH = 48;
/** No sane manifest comes near this; refusing bigger ones keeps a stray huge file from being read into memory. */
export const MAX_MANIFEST_PAYLOAD = 256 * 1024 * 1024;
/**
 * Upper bound on one frame's raw length. Writers choose smaller pieces (a few
 * MiB); the bound exists so that a manifest cannot make a reader allocate
 * arbitrarily large buffers.
 */
export const MAX_FRAME_LENGTH = 64 * 1024 * 1024;
/** More GPUs than any host has; bounds loops over devices driven by the manifest. */
export const MAX_DEVICES = 1024;
/** Smallest block a digest may cover (and the unit block sizes are multiples of). */
export const MIN_DIGEST_BLOCK = 4096;
/**
 * Block of the digests images carry: the unit an incremental image stores
 * or leaves to its parent, and the unit of zeros that neither an image nor
 * a suspend moves. 256 KiB finds zero regions eight times smaller than
 * 2 MiB did and keeps a 64 GiB pool at 262144 digests (2 MiB in the
 * manifest; the kernel reads the pool at HBM speed whatever the block).
 * An image made against a parent uses the parent's block instead.
 */
export const DIGEST_BLOCK = 256 * 1024;
/** A longer chain of parents is refused (a loop, or a chain nobody should restore through). */
export const MAX_CHAIN_LENGTH = 64;

/** Where each of size byte planes of n bytes lies: byte k of every whole element; the bytes of a partial element end the last plane. */
export function planeParts(n: number, size: 2 | 4): [number, number][] {
  const count = Math.floor(n / size);
  return Array.from({ length: size }, (_, k) => [k * count, k === size - 1 ? n : (k + 1) * count]);
}

/** A zstd frame that stores n bytes in raw blocks: its header (magic, descriptor, 8-byte content size), a block header per 128 KiB, the checksum. */
export function storedFrameBound(n: number): number {
  return 13 + 3 * Math.max(1, Math.ceil(n / (128 * 1024))) + n + 4;
}
