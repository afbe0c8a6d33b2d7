#!/usr/bin/env node
// The `fastpaste` command. The sources are TypeScript; a fresh checkout works right after
// `npm install` with no build step of its own: the sources are compiled on first start (and after
// any edit) to .build/, and the compiled code runs (bin/build.js).
// FASTPASTE_TSX=1 runs the sources through tsx instead, for debugging with TypeScript paths.
import { pathToFileURL } from 'node:url';

if (process.env.FASTPASTE_TSX === '1') {
  const { register } = await import('tsx/esm/api');
  register();
  await import('../src/cli/main.ts');
} else {
  const { ensureBuilt } = await import('./build.js');
  const built = await ensureBuilt();
  await import(pathToFileURL(`${built}/src/cli/main.js`).href);
}
