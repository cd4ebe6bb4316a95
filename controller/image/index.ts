/**
 * The on-disk image format: a directory holding `manifest` (what was saved and
 * where) and `pool.zst` (the saved device memory as checksummed zstd frames).
 * Written atomically by ImageWriter, opened and checked by ImageReader.
 */
export {
  DATA_FILE,
  FORMAT_VERSION,
  MANIFEST_FILE,
  MAX_FRAME_LENGTH,
  decodeManifest,
  encodeManifest,
} from './manifest.js';
export type {
  AllocationRecord,
  DataSection,
  DeviceRecord,
  FrameRecord,
  ImageSource,
  Manifest,
  OutsidePoolBytes,
  ParentRecord,
  PoolLayout,
} from './manifest-types.js';
export { checkManifest, type ManifestCheck } from './manifest-check.js';
export { compressFrame, decompressFrame } from './frame-codec.js';
export { ImageWriter, type ImageWriterOptions } from './writer.js';
export { publishedPath, removeStaleTempDirs, tempDirOwner } from './temp-dirs.js';
export { ImageReader, frameLabel, type FrameSource, type VerifyProgress, type VerifyResult } from './reader.js';
