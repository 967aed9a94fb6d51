import { setFlagsFromString } from 'node:v8';

/**
 * Turns off V8's allocation-site pretenuring for this process (the dispatcher is the process's
 * main job; setting it again changes nothing). A burst of concurrent requests — a backlog after a pause, a client's
 * spike — makes the objects of the engine call's allocation sites (undici's request handler,
 * request, response body and stream listeners) survive a young-generation collection in numbers,
 * and V8 then allocates every later object of those sites directly in the old generation, for
 * good. Each such old object keeps the young objects it points to alive through every scavenge
 * until a full collection finds it dead, so they are promoted too: measured with
 * `bench:overhead --trace-gc` at 1,000 req/s, a dispatcher in that state promotes 0.54–1.13 MB
 * per scavenge (pauses ~2.2–2.8 ms, an old-generation collection about every 4 s) against
 * 0.08–0.19 MB (~1 ms) with pretenuring off, even after a forced burst. Set at start, before the
 * request path has warmed up; node refuses the flag in NODE_OPTIONS. The flag is process-wide: an
 * application that embeds `startDispatcher` has pretenuring off for all its code.
 */
export function tuneV8ForRequestPath(): void {
  setFlagsFromString('--no-allocation-site-pretenuring');
}
