/**
 * The image stream's layout (stream.ts says what it is for): a header,
 * then records. Header: magic, version u32, and (version 2 on) at most
 * the image's bytes u64 (0: not known), so that a receiver chooses where
 * the image fits before any of it arrives. Record: kind u8, path length u16, payload length u32,
 * offset u64 (DATA: where the payload goes in the file), CRC-32 of the
 * payload u32, path (UTF-8, relative to the image), payload. Files are
 * made 0600 and directories 0700, as images are.
 */
export const MAGIC = Buffer.from('GPCKSTRM');
export const VERSION = 2;
/** The oldest version read: 1, without the bound. */
export const OLDEST_VERSION = 1;
export const HEADER_BYTES = MAGIC.length + 4 + 8;
export const V1_HEADER_BYTES = MAGIC.length + 4;
export const RECORD_BYTES = 1 + 2 + 4 + 8 + 4;
/** Bytes of file data per record. */
export const CHUNK = 4 << 20;
export const MAX_PAYLOAD = 64 << 20;
/** Bytes between two lines of the debug trace of a stream's progress. */
export const TRACE_BYTES = 128 << 20;

export enum Kind {
  DIR = 1,
  FILE = 2,
  DATA = 3,
  END = 4,
}

/** The end record's payload. */
export interface EndSummary {
  /** Every file, its size. */
  files: Record<string, number>;
  dataRecords: number;
  dataBytes: number;
}

export interface StreamSummary {
  bytes: number;
  files: number;
}
