#!/usr/bin/env node
// The `fastpaste` command. The sources are TypeScript run through tsx, so a fresh checkout works
// right after `npm install` with no build step.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/main.ts');
