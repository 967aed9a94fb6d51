import { Command } from 'ioredis';

/**
 * An ioredis command whose request is encoded into one Buffer. ioredis builds a command's RESP by
 * string concatenation — four concatenations per argument, then a flattening of the whole string
 * when the socket writes it — which for an admission's ~45 arguments was 12 % of everything a
 * dispatcher allocated per request (`bench:overhead --heap-profile`). Here the lengths are summed
 * first and each argument is copied once into a buffer of that size (from Node's buffer pool when
 * small), so a call leaves almost nothing on the JavaScript heap.
 *
 * Arguments must be strings (the store stringifies its numbers first).
 */
export class RespCommand extends Command {
  override toWritable(): Buffer {
    return encodeResp(this.name, this.args as string[]);
  }
}

const CR = 13;
const LF = 10;

/** The RESP array of bulk strings `[name, ...args]`, as Redis reads a command. */
export function encodeResp(name: string, args: readonly string[]): Buffer {
  const n = args.length;
  const lengths = new Array<number>(n);
  let total = header(n + 1) + bulk(Buffer.byteLength(name));
  for (let i = 0; i < n; i++) {
    const s = args[i] as string;
    // A string whose UTF-8 is as long as it is has only ASCII characters.
    const len = s.length < 64 && isAscii(s) ? s.length : Buffer.byteLength(s);
    lengths[i] = len;
    total += bulk(len);
  }
  const buf = Buffer.allocUnsafe(total);
  let o = writePrefix(buf, 0, 42 /* * */, n + 1);
  o = writeBulk(buf, o, name, Buffer.byteLength(name));
  for (let i = 0; i < n; i++) o = writeBulk(buf, o, args[i] as string, lengths[i] as number);
  return buf;
}

function isAscii(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 127) return false;
  return true;
}

/** Bytes of `$<len>\r\n<len bytes>\r\n`. */
function bulk(len: number): number {
  return header(len) + len + 2;
}

/** Bytes of `<c><n>\r\n`. */
function header(n: number): number {
  return 1 + digits(n) + 2;
}

function digits(n: number): number {
  let d = 1;
  while (n >= 10) {
    n = Math.floor(n / 10);
    d++;
  }
  return d;
}

/** Writes `<c><n>\r\n` at `o`; returns the offset after it. */
function writePrefix(buf: Buffer, o: number, c: number, n: number): number {
  buf[o++] = c;
  const d = digits(n);
  for (let i = d - 1; i >= 0; i--) {
    buf[o + i] = 48 + (n % 10);
    n = Math.floor(n / 10);
  }
  o += d;
  buf[o++] = CR;
  buf[o++] = LF;
  return o;
}

function writeBulk(buf: Buffer, o: number, s: string, len: number): number {
  o = writePrefix(buf, o, 36 /* $ */, len);
  if (len === s.length && len < 64) for (let i = 0; i < len; i++) buf[o + i] = s.charCodeAt(i);
  else buf.write(s, o, len, 'utf8');
  o += len;
  buf[o++] = CR;
  buf[o++] = LF;
  return o;
}
