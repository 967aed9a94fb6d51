import type { Principal } from '@fairway/dispatcher';
import { ApiError } from '@fairway/dispatcher';
import multipart from '@fastify/multipart';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { parseBatchInput } from './batch-input.ts';
import { BATCH_ENDPOINTS, type BatchLimits } from './batch-limits.ts';
import type { BatchRunner } from './batch-runner.ts';
import type { BatchStore } from './batch-store.ts';

/** Options of the Files and Batch routes. */
export interface BatchRoutesOptions {
  /** The state and the runner; undefined on the in-memory store (every route answers 501). */
  readonly backend: { readonly store: BatchStore; readonly runner: BatchRunner } | undefined;
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
    const { tenant, store } = backendFor(request);
    if (!request.isMultipart())
      throw badRequest('upload a file as multipart/form-data with fields purpose and file');
    let purpose: string | undefined;
    let file: { name: string; data: Buffer } | undefined;
    try {
      for await (const part of request.parts()) {
        if (part.type === 'file') {
          if (part.fieldname !== 'file')
            throw badRequest(`unexpected file field ${part.fieldname}`, part.fieldname);
          file = { name: part.filename, data: await part.toBuffer() };
        } else if (part.fieldname === 'purpose') purpose = String(part.value);
      }
    } catch (err) {
      if ((err as { code?: string }).code === 'FST_REQ_FILE_TOO_LARGE')
        throw new ApiError('BODY_TOO_LARGE', `a file may be at most ${limits.maxFileBytes} bytes`, {
          param: 'file',
        });
      if (err instanceof ApiError) throw err;
      throw badRequest(`malformed multipart body: ${(err as Error).message}`);
    }
    if (purpose !== 'batch') throw badRequest('purpose must be "batch"', 'purpose');
    if (file === undefined) throw badRequest('missing file field "file"', 'file');
    parseBatchInput(file.data.toString('utf8'), limits);
    const filename = file.name.slice(0, 255) || 'input.jsonl';
    return store.putFile(tenant, { id: `file-${opts.newId()}`, filename, purpose, content: file.data });
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
    const content = await store.fileContent(tenant, id);
    if (content === undefined) throw notFound('File', id);
    return reply.type('application/jsonl').send(content);
  });

  app.delete('/v1/files/:id', async (request) => {
    const { tenant, store } = backendFor(request);
    const id = idParam(request);
    if (!(await store.deleteFile(tenant, id))) throw notFound('File', id);
    return { id, object: 'file', deleted: true };
  });

  app.post('/v1/batches', async (request) => {
    const { tenant, keyId, store, runner } = backendFor(request);
    const parsed = createBatchSchema.safeParse(request.body);
    if (!parsed.success) throw firstIssue(parsed.error);
    const b = parsed.data;
    const input = await store.file(tenant, b.input_file_id);
    if (input === undefined) throw notFound('File', b.input_file_id);
    if (input.purpose !== 'batch')
      throw badRequest(`file ${input.id} has purpose ${input.purpose}, not batch`, 'input_file_id');
    const created = await store.createBatch(tenant, {
      id: `batch_${opts.newId()}`,
      keyId,
      endpoint: b.endpoint,
      inputFileId: b.input_file_id,
      completionWindowS: WINDOWS[b.completion_window] ?? 24 * 3600,
      sloClass: opts.sloClass,
      metadata: b.metadata ?? undefined,
    });
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

function listBody<T extends { id: string }>(page: { data: T[]; hasMore: boolean }) {
  return {
    object: 'list' as const,
    data: page.data,
    first_id: page.data[0]?.id ?? null,
    last_id: page.data.at(-1)?.id ?? null,
    has_more: page.hasMore,
  };
}
