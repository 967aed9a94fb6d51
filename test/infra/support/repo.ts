import { fileURLToPath } from 'node:url';

/** The repository's root directory (with a trailing slash). */
export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
