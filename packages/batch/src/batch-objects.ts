/** OpenAI's File object. */
export interface FileObject {
  readonly id: string;
  readonly object: 'file';
  readonly bytes: number;
  /** Unix seconds. */
  readonly created_at: number;
  readonly filename: string;
  readonly purpose: string;
  readonly status: 'processed';
  /** Unix seconds when the file is deleted (the tenant's retention, or less if the upload asked). */
  readonly expires_at: number | null;
  readonly status_details: null;
}

/** A batch's statuses, as OpenAI names them. */
export type BatchStatus =
  | 'validating'
  | 'failed'
  | 'in_progress'
  | 'finalizing'
  | 'completed'
  | 'expired'
  | 'cancelling'
  | 'cancelled';

/** One entry of a batch's `errors` (validation failures). */
export interface BatchErrorEntry {
  readonly code: string;
  readonly message: string;
  readonly param: string | null;
  readonly line: number | null;
}

/** OpenAI's Batch object. */
export interface BatchObject {
  readonly id: string;
  readonly object: 'batch';
  readonly endpoint: string;
  readonly errors: { object: 'list'; data: BatchErrorEntry[] } | null;
  readonly input_file_id: string;
  readonly completion_window: string;
  readonly status: BatchStatus;
  readonly output_file_id: string | null;
  readonly error_file_id: string | null;
  readonly created_at: number;
  readonly in_progress_at: number | null;
  readonly expires_at: number | null;
  readonly finalizing_at: number | null;
  readonly completed_at: number | null;
  readonly failed_at: number | null;
  readonly expired_at: number | null;
  readonly cancelling_at: number | null;
  readonly cancelled_at: number | null;
  readonly request_counts: { total: number; completed: number; failed: number };
  readonly metadata: Record<string, string> | null;
}

const STAMPS = [
  'in_progress_at',
  'expires_at',
  'finalizing_at',
  'completed_at',
  'failed_at',
  'expired_at',
  'cancelling_at',
  'cancelled_at',
] as const;

/** A stamp field of a batch (Unix seconds). */
export type BatchStamp = (typeof STAMPS)[number];

function int(v: string | undefined): number {
  return v === undefined ? 0 : Number.parseInt(v, 10);
}

/** The Batch object of a batch's stored hash. */
export function batchObject(h: Record<string, string>): BatchObject {
  const stamps = Object.fromEntries(
    STAMPS.map((s) => [s, h[s] === undefined ? null : Number.parseInt(h[s], 10)]),
  ) as Record<BatchStamp, number | null>;
  return {
    id: h.id ?? '',
    object: 'batch',
    endpoint: h.endpoint ?? '',
    errors:
      h.errors === undefined ? null : { object: 'list', data: JSON.parse(h.errors) as BatchErrorEntry[] },
    input_file_id: h.input_file_id ?? '',
    completion_window: h.completion_window ?? '24h',
    status: (h.status ?? 'failed') as BatchStatus,
    output_file_id: h.output_file_id ?? null,
    error_file_id: h.error_file_id ?? null,
    created_at: int(h.created_at),
    ...stamps,
    request_counts: { total: int(h.total), completed: int(h.completed), failed: int(h.failed) },
    metadata: h.metadata === undefined ? null : (JSON.parse(h.metadata) as Record<string, string>),
  };
}

/** The File object of a file's stored hash. */
export function fileObject(h: Record<string, string>): FileObject {
  return {
    id: h.id ?? '',
    object: 'file',
    bytes: int(h.bytes),
    created_at: int(h.created_at),
    filename: h.filename ?? '',
    purpose: h.purpose ?? '',
    status: 'processed',
    expires_at: h.expires_at === undefined ? null : int(h.expires_at),
    status_details: null,
  };
}
