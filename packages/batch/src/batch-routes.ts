import { Readable } from 'node:stream';
import type { Principal } from '@fairway/dispatcher';
import { ApiError } from '@fairway/dispatcher';
import multipart from '@fastify/multipart';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { BatchInputParser } from './batch-input.ts';
import { BATCH_ENDPOINTS, type BatchLimits } from './batch-limits.ts';
import type { BatchRunner } from './batch-runner.ts';
import { type BatchStore, FILE_CHUNK_BYTES, type FileUpload, UploadGoneError } from './batch-store.ts';
import { insufficientStorage, type StorageRefusal, storageError } from './errors.ts';
import type { MemoryGuard } from './memory-guard.ts';

/** Options of the Files and Batch routes. */
export interface BatchRoutesOptions {
  /** The state, the runner and the memory guard; undefined on the in-memory store (every route answers 501). */
  readonly backend:
    | { readonly store: BatchStore; readonly runner: BatchRunner; readonly guard?: MemoryGuard | undefined }
    | undefined;
  readonly authenticate: (headers: FastifyRequest['headers']) => Principal;
  readonly limits: BatchLimits;
  /** The SLO class batch lines run in. */
  readonly sloClass: string;
  /** Random hex ids. */
  readonly newId: () => string;
}

/** `completion_window` values accepted, in seconds. */
const WINDOWS: Record<string, number> = { '24h': 24 * 3600 };

const createBatchSchema = z
  .object({
    input_file_id: z.string().min(1).max(128),
    endpoint: z.enum(BATCH_ENDPOINTS),
    completion_window: z.enum(Object.keys(WINDOWS) as [string, ...string[]]),
    metadata: z.record(z.string().max(64), z.string().max(512)).nullish(),
  })
  .strict();

const listQuery = z.object({
  limit: z.coerce.number().int().min(1).max(10_000).optional(),
  after: z.string().max(128).optional(),
  purpose: z.string().max(64).optional(),
});

const ID = /^[A-Za-z0-9_-]{1,128}$/;

/**
 * Bytes of a multipart body that are not the file (boundaries, part headers, the purpose field),
 * taken off its Content-Length to estimate the file's size before reading it.
 */
const MULTIPART_ALLOWANCE = 4096;

/** OpenAI's `expires_after`, as a JSON field or as the bracketed fields its clients send. */
const expiresAfterSchema = z
  .object({ anchor: z.literal('created_at'), seconds: z.coerce.number().int().min(1) })
  .strict();

/** Refuses new files and batches while Redis is nearly full. */
async function checkMemory(guard: MemoryGuard | undefined): Promise<void> {
  const over = await guard?.overLimit();
  if (over !== undefined && guard !== undefined)
    throw insufficientStorage(over.usedBytes, over.limitBytes, guard.refuseAbove);
}

/** Redis refusing a write for want of memory (`OOM command not allowed…`). */
function isRedisOom(err: unknown): boolean {
  return err instanceof Error && err.name === 'ReplyError' && err.message.startsWith('OOM');
}

function notFound(kind: 'File' | 'Batch', id: string): ApiError {
  return new ApiError('NOT_FOUND', `No such ${kind} object: ${id}`, { param: 'id' });
}

function badRequest(message: string, param?: string): ApiError {
  return new ApiError('INVALID_REQUEST', message, param === undefined ? {} : { param });
}

function firstIssue(err: z.ZodError): ApiError {
  const issue = err.issues[0];
  const param = issue?.path.join('.') || undefined;
  return badRequest(`${param ?? 'body'}: ${issue?.message ?? 'invalid'}`, param);
}

function idParam(request: FastifyRequest): string {
  const id = (request.params as { id?: string }).id ?? '';
  if (!ID.test(id)) throw badRequest('id must be 1-128 characters of [A-Za-z0-9_-]', 'id');
  return id;
}

/**
 * OpenAI's Files and Batch API: `POST/GET /v1/files`, `GET/DELETE /v1/files/:id`,
 * `GET /v1/files/:id/content`, `POST/GET /v1/batches`, `GET /v1/batches/:id`,
 * `POST /v1/batches/:id/cancel`. Everything belongs to the tenant of the key that made it; another
 * tenant's file or batch answers 404, as if it did not exist.
 */
export const batchRoutes: FastifyPluginAsync<BatchRoutesOptions> = async (app, opts) => {
  const { limits } = opts;
  await app.register(multipart, {
    limits: { fileSize: limits.maxFileBytes, files: 1, fields: 8, fieldSize: 1024, parts: 10 },
  });
  const backendFor = (request: FastifyRequest) => {
    const principal = opts.authenticate(request.headers);
    if (opts.backend === undefined)
      throw new ApiError(
        'NOT_IMPLEMENTED',
        'the Files and Batch API needs Redis: start fairway with REDIS_URL (this one runs on the in-memory store)',
      );
    return { tenant: principal.tenant, keyId: principal.keyId ?? '', ...opts.backend };
  };

  app.post('/v1/files', { bodyLimit: limits.maxFileBytes + 64 * 1024 }, async (request) => {
    const { tenant, store, guard } = backendFor(request);
    if (!request.isMultipart())
      throw badRequest('upload a file as multipart/form-data with fields purpose and file');
    // Every refusal that needs no byte of the body comes before reading it.
    const tooLarge = () =>
      new ApiError('BODY_TOO_LARGE', `a file may be at most ${limits.maxFileBytes} bytes`, { param: 'file' });
    const declared = Number.parseInt(String(request.headers['content-length'] ?? ''), 10);
    const fileBytes = Number.isFinite(declared) ? Math.max(0, declared - MULTIPART_ALLOWANCE) : 0;
    if (fileBytes > limits.maxFileBytes) throw tooLarge();
    const quota = store.limits(tenant).maxBytes;
    if (fileBytes > quota)
      throw new ApiError(
        'BODY_TOO_LARGE',
        `the file (about ${fileBytes} bytes) is larger than tenant ${tenant}'s whole storage quota of ${quota} bytes`,
        { param: 'file' },
      );
    await checkMemory(guard);
    const begun = await store.beginUpload(
      tenant,
      { id: `file-${opts.newId()}`, filename: '', purpose: '' },
      { declaredBytes: fileBytes },
    );
    if (!('append' in begun)) throw storageError(tenant, begun, fileBytes);
    const upload: FileUpload = begun;
    try {
      const fields: Record<string, string> = {};
      let filename: string | undefined;
      for await (const part of request.parts()) {
        if (part.type === 'file') {
          if (part.fieldname !== 'file')
            throw badRequest(`unexpected file field ${part.fieldname}`, part.fieldname);
          filename = part.filename;
          await streamFile(part.file, upload, new BatchInputParser(limits), (r, adding) =>
            storageError(tenant, r, adding),
          );
          if (part.file.truncated) throw tooLarge();
        } else fields[part.fieldname] = String(part.value);
      }
      if (fields.purpose !== 'batch') throw badRequest('purpose must be "batch"', 'purpose');
      if (filename === undefined) throw badRequest('missing file field "file"', 'file');
      return await upload.commit({
        filename: filename.slice(0, 255) || 'input.jsonl',
        purpose: fields.purpose,
        expiresInS: expiresAfter(fields),
      });
    } catch (err) {
      await upload.abort();
      if ((err as { code?: string }).code === 'FST_REQ_FILE_TOO_LARGE') throw tooLarge();
      if (err instanceof ApiError) throw err;
      if (err instanceof UploadGoneError)
        throw new ApiError('CLIENT_TIMEOUT', 'the upload sent no data for too long and was given up');
      if (isRedisOom(err)) throw insufficientStorage(1, 1, guard?.refuseAbove ?? 1);
      if ((err as Error).name === 'ReplyError') throw err;
      throw badRequest(`malformed multipart body: ${(err as Error).message}`);
    }
  });

  app.get('/v1/files', async (request) => {
    const { tenant, store } = backendFor(request);
    const q = listQuery.safeParse(request.query);
    if (!q.success) throw firstIssue(q.error);
    const page = await store.listFiles(tenant, {
      limit: q.data.limit ?? 10_000,
      after: q.data.after,
      purpose: q.data.purpose,
    });
    return listBody(page);
  });

  app.get('/v1/files/:id', async (request) => {
    const { tenant, store } = backendFor(request);
    const id = idParam(request);
    return (await store.file(tenant, id)) ?? Promise.reject(notFound('File', id));
  });

  app.get('/v1/files/:id/content', async (request, reply) => {
    const { tenant, store } = backendFor(request);
    const id = idParam(request);
    const file = await store.file(tenant, id);
    const chunks = await store.fileChunks(tenant, id);
    if (file === undefined || chunks === undefined) throw notFound('File', id);
    // Piece by piece from Redis as the client reads: a download holds one piece, not the file.
    return reply
      .type('application/jsonl')
      .header('content-length', String(file.bytes))
      .send(Readable.from(chunks, { objectMode: false }));
  });

  app.delete('/v1/files/:id', async (request) => {
    const { tenant, store } = backendFor(request);
    const id = idParam(request);
    if (!(await store.deleteFile(tenant, id))) throw notFound('File', id);
    return { id, object: 'file', deleted: true };
  });

  app.post('/v1/batches', async (request) => {
    const { tenant, keyId, store, runner, guard } = backendFor(request);
    const parsed = createBatchSchema.safeParse(request.body);
    if (!parsed.success) throw firstIssue(parsed.error);
    const b = parsed.data;
    const input = await store.file(tenant, b.input_file_id);
    if (input === undefined) throw notFound('File', b.input_file_id);
    if (input.purpose !== 'batch')
      throw badRequest(`file ${input.id} has purpose ${input.purpose}, not batch`, 'input_file_id');
    await checkMemory(guard);
    const created = await store.createBatch(tenant, {
      id: `batch_${opts.newId()}`,
      keyId,
      endpoint: b.endpoint,
      inputFileId: b.input_file_id,
      completionWindowS: WINDOWS[b.completion_window] ?? 24 * 3600,
      sloClass: opts.sloClass,
      metadata: b.metadata ?? undefined,
    });
    if (!('id' in created)) throw storageError(tenant, created);
    await runner.enqueueStart(created.id);
    return created;
  });

  app.get('/v1/batches', async (request) => {
    const { tenant, store } = backendFor(request);
    const q = listQuery.safeParse(request.query);
    if (!q.success) throw firstIssue(q.error);
    return listBody(
      await store.listBatches(tenant, { limit: Math.min(q.data.limit ?? 20, 100), after: q.data.after }),
    );
  });

  app.get('/v1/batches/:id', async (request) => {
    const { tenant, store } = backendFor(request);
    const id = idParam(request);
    return (await store.batch(tenant, id)) ?? Promise.reject(notFound('Batch', id));
  });

  app.post('/v1/batches/:id/cancel', async (request) => {
    const { tenant, store } = backendFor(request);
    const id = idParam(request);
    const batch = await store.batch(tenant, id);
    if (batch === undefined) throw notFound('Batch', id);
    if (batch.status === 'cancelling' || batch.status === 'cancelled') return batch;
    if (!(await store.moveStatus(id, 'cancelling', 'cancelling_at', ['validating', 'in_progress'])))
      throw badRequest(`cannot cancel a batch with status ${batch.status}`);
    return (await store.batch(tenant, id)) ?? batch;
  });
};

/**
 * Writes an uploaded file to storage as it arrives, in pieces of {@link FILE_CHUNK_BYTES},
 * checking its lines on the way; waiting on each write holds the client back (backpressure), so
 * the dispatcher holds about one piece of the file at a time.
 */
async function streamFile(
  file: AsyncIterable<Buffer>,
  upload: FileUpload,
  parser: BatchInputParser,
  refused: (r: StorageRefusal, adding: number) => ApiError,
): Promise<void> {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  const write = async (piece: Buffer) => {
    const r = await upload.append(piece);
    if (r !== undefined) throw refused(r, piece.length);
  };
  for await (const chunk of file) {
    parser.push(chunk);
    pending.push(chunk);
    pendingBytes += chunk.length;
    if (pendingBytes < FILE_CHUNK_BYTES) continue;
    // Whole pieces only (see FILE_CHUNK_BYTES); the rest waits for the next chunks.
    let joined = Buffer.concat(pending, pendingBytes);
    while (joined.length >= FILE_CHUNK_BYTES) {
      await write(joined.subarray(0, FILE_CHUNK_BYTES));
      joined = joined.subarray(FILE_CHUNK_BYTES);
    }
    // A copy of the rest, so the joined buffer is not kept alive by it.
    pending = joined.length > 0 ? [Buffer.from(joined)] : [];
    pendingBytes = joined.length;
  }
  if (pendingBytes > 0) await write(Buffer.concat(pending, pendingBytes));
  parser.end();
}

/** How long the upload asks its file to live (`expires_after`), seconds; undefined if it does not. */
function expiresAfter(fields: Record<string, string>): number | undefined {
  let raw: unknown;
  if (fields.expires_after !== undefined) {
    try {
      raw = JSON.parse(fields.expires_after);
    } catch {
      throw badRequest('expires_after must be a JSON object {anchor, seconds}', 'expires_after');
    }
  } else if (fields['expires_after[anchor]'] !== undefined || fields['expires_after[seconds]'] !== undefined)
    raw = { anchor: fields['expires_after[anchor]'], seconds: fields['expires_after[seconds]'] };
  else return undefined;
  const parsed = expiresAfterSchema.safeParse(raw);
  if (!parsed.success)
    throw badRequest(
      'expires_after must be {"anchor": "created_at", "seconds": <positive integer>}',
      'expires_after',
    );
  return parsed.data.seconds;
}

function listBody<T extends { id: string }>(page: { data: T[]; hasMore: boolean }) {
  return {
    object: 'list' as const,
    data: page.data,
    first_id: page.data[0]?.id ?? null,
    last_id: page.data.at(-1)?.id ?? null,
    has_more: page.hasMore,
  };
}
