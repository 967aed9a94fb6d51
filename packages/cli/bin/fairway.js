#!/usr/bin/env node
// Runs the CLI from its TypeScript sources: tsx compiles them on the fly, so `npx fairway` works
// right after `npm install`, with no build step.
import { register } from 'tsx/esm/api';

register();
const { run } = await import('../src/main.ts');
process.exitCode = await run(process.argv);
