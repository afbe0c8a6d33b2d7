/**
 * The `fastpaste` command (D1): `serve`, `migrate`, and the administrator's `keys` tool (D19).
 * Every command reads the same config schema as the server.
 */
import { Command, InvalidArgumentError } from 'commander';
import { formatTimestamp } from '../clock.js';
import { ConfigError, loadConfig } from '../config.js';
import { AppError } from '../errors.js';
import type { ApiKey } from '../keys/key-service.js';
import { keySubject } from '../keys/quota-service.js';
import { serve } from '../main.js';
import { createServices, type Services } from '../services.js';
import { openStorage } from '../storage/database.js';
import { migrateToLatest } from '../storage/migrations.js';
import { asDatabaseUrlRefusal, isRefusal, refusalMessage } from './refusals.js';

function wholeNumber(value: string): number {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError('must be a whole number (0 for unlimited)');
  return Number(value);
}

/** The most rows a listing prints. */
const MAX_LISTED = 10_000;

/** How many rows to list: 1 to MAX_LISTED (a larger one reached the database as a LIMIT it refuses). */
function listCount(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > MAX_LISTED) {
    throw new InvalidArgumentError(`must be a whole number from 1 to ${MAX_LISTED}`);
  }
  return Number(value);
}

/** Opens the configured database, migrated, runs `task`, and closes it. */
async function withServices<T>(task: (services: Services) => Promise<T>): Promise<T> {
  const config = loadConfig();
  const storage = await asDatabaseUrlRefusal(async () => openStorage(config.databaseUrl));
  try {
    await asDatabaseUrlRefusal(() => migrateToLatest(storage));
    const services = await createServices(storage, { config });
    try {
      return await task(services);
    } finally {
      await services.close();
    }
  } finally {
    await storage.close();
  }
}

function describeKey(key: ApiKey): Record<string, unknown> {
  return {
    id: key.id,
    name: key.name,
    active: key.active,
    hourly_limit: key.limits.hourly,
    daily_limit: key.limits.daily,
    monthly_limit: key.limits.monthly,
    webhook_url: key.webhookUrl,
    // False once a receiver's 410 turned the webhook off (keys webhook sets it again); null without one.
    webhook_active: key.webhookUrl ? key.webhookActive : null,
    created_at: formatTimestamp(key.createdAt),
  };
}

const program = new Command('fastpaste').description('fastpaste: a self-hostable paste service');

program
  .command('serve')
  .description('run the server (settings from the environment; see the README)')
  .action(async () => {
    await serve(loadConfig());
  });

program
  .command('migrate')
  .description('apply the database migrations and exit')
  .action(async () => {
    const storage = await asDatabaseUrlRefusal(async () => openStorage(loadConfig().databaseUrl));
    const applied = await asDatabaseUrlRefusal(() => migrateToLatest(storage)).finally(() => storage.close());
    console.log(applied.length === 0 ? 'The database is up to date.' : `Applied: ${applied.join(', ')}`);
  });

const keys = program.command('keys').description('manage API keys');

keys
  .command('create')
  .description('create an API key; the key is shown once')
  .requiredOption('--name <name>', 'a label for the key')
  .option('--hourly <n>', 'requests per hour, 0 for unlimited', wholeNumber, 0)
  .option('--daily <n>', 'requests per day, 0 for unlimited', wholeNumber, 0)
  .option('--monthly <n>', 'requests per month, 0 for unlimited', wholeNumber, 0)
  .option('--webhook <url>', 'URL told of every paste created with this key')
  .option('--json', 'print JSON')
  .action(async (options) => {
    const created = await withServices((s) =>
      s.keys.create({
        name: options.name,
        hourly: options.hourly,
        daily: options.daily,
        monthly: options.monthly,
        webhookUrl: options.webhook ?? null,
      }),
    );
    if (options.json) {
      console.log(
        JSON.stringify({ key: created.key, name: created.apiKey.name, webhook_secret: created.webhookSecret }),
      );
      return;
    }
    console.log(`Created key ${created.apiKey.id} "${created.apiKey.name}".`);
    console.log(`API key (shown once, store it now): ${created.key}`);
    if (created.webhookSecret) console.log(`Webhook signing secret (shown once): ${created.webhookSecret}`);
  });

keys
  .command('list')
  .description('list API keys (never the secrets)')
  .option('--json', 'print JSON')
  .action(async (options) => {
    const list = await withServices((s) => s.keys.list());
    if (options.json) {
      console.log(JSON.stringify(list.map(describeKey)));
      return;
    }
    if (list.length === 0) console.log('No API keys yet: fastpaste keys create --name NAME');
    for (const key of list) {
      const limits = `${key.limits.hourly}/h ${key.limits.daily}/d ${key.limits.monthly}/month`;
      const hook = key.webhookUrl && !key.webhookActive ? '  (webhook off: its receiver answered 410)' : '';
      console.log(`${key.id}  ${key.active ? 'active  ' : 'inactive'}  ${limits}  ${key.name}${hook}`);
    }
  });

for (const [name, active] of [
  ['deactivate', false],
  ['activate', true],
] as const) {
  keys
    .command(`${name} <key>`)
    .description(`${name} a key, given by its id (k_...) or the key itself`)
    .action(async (idOrKey: string) => {
      const key = await withServices((s) => s.keys.setActive(idOrKey, active));
      console.log(`Key ${key.id} "${key.name}" is now ${active ? 'active' : 'inactive'}.`);
    });
}

keys
  .command('limits <key>')
  .description('set the hourly, daily and monthly request limits of a key (0 = unlimited)')
  .option('--hourly <n>', 'requests per hour', wholeNumber)
  .option('--daily <n>', 'requests per day', wholeNumber)
  .option('--monthly <n>', 'requests per month', wholeNumber)
  .action(async (idOrKey: string, options: { hourly?: number; daily?: number; monthly?: number }) => {
    const key = await withServices((s) => s.keys.setLimits(idOrKey, options));
    const show = (n: number) => (n === 0 ? 'unlimited' : String(n));
    console.log(
      `Key ${key.id} "${key.name}": hourly ${show(key.limits.hourly)}, daily ${show(key.limits.daily)}, monthly ${show(key.limits.monthly)}.`,
    );
  });

keys
  .command('usage <key>')
  .description('requests used and left in the current hour, day and month (UTC); an unlimited window is not counted')
  .option('--json', 'print JSON')
  .action(async (idOrKey: string, options: { json?: boolean }) => {
    const { key, windows } = await withServices(async (s) => {
      const found = await s.keys.get(idOrKey);
      return { key: found, windows: await s.quota.usage(keySubject(found.id), found.limits) };
    });
    if (options.json) {
      console.log(
        JSON.stringify(
          windows.map((w) => ({
            window: w.kind,
            limit: w.limit,
            // An unlimited window is not counted (README, Rate limits): no figure to show.
            used: w.limit === 0 ? null : w.used,
            remaining: w.limit === 0 ? null : w.remaining,
            resets_in_seconds: w.resetSeconds,
          })),
        ),
      );
      return;
    }
    console.log(`Key ${key.id} "${key.name}"`);
    for (const w of windows) {
      const line =
        w.limit === 0
          ? 'unlimited, not counted'
          : `used ${w.used}, ${w.remaining} left of ${w.limit}, resets in ${w.resetSeconds} s`;
      console.log(`  ${w.kind.padEnd(8)} ${line}`);
    }
  });

keys
  .command('webhook <key> [url]')
  .description('set the URL told of every paste created with a key (a new signing secret is shown once), or --clear it')
  .option('--clear', 'remove the webhook')
  .action(async (idOrKey: string, url: string | undefined, options: { clear?: boolean }) => {
    if (!options.clear && !url) throw new AppError('invalid_request', 'Give a URL, or --clear.');
    if (options.clear && url) throw new AppError('invalid_request', 'Give a URL or --clear, not both.');
    const { apiKey, secret } = await withServices((s) =>
      s.keys.setWebhook(idOrKey, options.clear ? null : (url as string)),
    );
    if (!secret) {
      console.log(`Key ${apiKey.id} "${apiKey.name}" has no webhook now.`);
      return;
    }
    console.log(`Key ${apiKey.id} "${apiKey.name}" announces new pastes to ${apiKey.webhookUrl}`);
    console.log(`Signing secret (shown once, give it to the receiver): ${secret}`);
  });

keys
  .command('deliveries <key>')
  .description('recent webhook deliveries of a key, with every attempt')
  .option('--limit <n>', `how many deliveries (1 to ${MAX_LISTED})`, listCount, 20)
  .option('--json', 'print JSON')
  .action(async (idOrKey: string, options: { limit: number; json?: boolean }) => {
    const { key, deliveries, attempts } = await withServices(async (s) => {
      const found = await s.keys.get(idOrKey);
      const rows = await s.webhooks.listForKey(found.id, options.limit);
      return { key: found, deliveries: rows, attempts: await s.webhooks.attemptsOf(rows.map((r) => r.id)) };
    });
    const shown = deliveries.map((d) => ({
      id: d.id,
      paste_id: d.paste_id,
      status: d.status,
      attempts: d.attempts,
      created_at: formatTimestamp(d.created_at),
      next_attempt_at: d.status === 'pending' ? formatTimestamp(d.next_attempt_at) : null,
      last_status_code: d.last_status_code,
      last_error: d.last_error,
      history: attempts
        .filter((a) => a.delivery_id === d.id)
        .map((a) => ({
          at: formatTimestamp(a.attempted_at),
          status_code: a.status_code,
          error: a.error,
          duration_ms: a.duration_ms,
        })),
    }));
    if (options.json) {
      console.log(JSON.stringify(shown));
      return;
    }
    console.log(`Key ${key.id} "${key.name}": ${shown.length} recent deliveries`);
    for (const d of shown) {
      console.log(
        `${d.id}  ${d.status.padEnd(9)} paste ${d.paste_id}  ${d.attempts} attempt(s)  created ${d.created_at} UTC`,
      );
      for (const a of d.history) {
        console.log(`    ${a.at} UTC  ${a.status_code ?? '---'}  ${a.duration_ms} ms${a.error ? `  ${a.error}` : ''}`);
      }
      if (d.next_attempt_at) console.log(`    next attempt ${d.next_attempt_at} UTC`);
    }
  });

keys
  .command('redeliver <delivery-id>')
  .description('send a webhook delivery again (by a running server), with a fresh back-off')
  .action(async (deliveryId: string) => {
    const outcome = await withServices((s) => s.webhooks.requeue(deliveryId, s.clock()));
    if (outcome === 'unknown') {
      // Named in full only in a delivery id's shape: a key pasted here by mistake is not printed.
      const named = /^msg_[\w-]{22}$/.test(deliveryId) ? deliveryId : `${deliveryId.slice(0, 7)}…`;
      throw new AppError('not_found', `No webhook delivery "${named}".`);
    }
    if (outcome === 'webhook off') {
      throw new AppError(
        'invalid_request',
        `Delivery ${deliveryId}'s key has no webhook on (a receiver's 410 turns it off): set it with \`keys webhook <key> <url>\`, then redeliver.`,
      );
    }
    if (outcome === 'sending') {
      throw new AppError(
        'invalid_request',
        `Delivery ${deliveryId} is being sent right now; \`keys deliveries\` shows how it ends. Redeliver it after that.`,
      );
    }
    console.log(`Delivery ${deliveryId} is queued again; a running server sends it within a second.`);
  });

try {
  await program.parseAsync(process.argv);
} catch (err) {
  if (err instanceof ConfigError || err instanceof AppError) {
    console.error(`fastpaste: ${err.message}`);
    process.exit(err instanceof ConfigError ? 78 : 1);
  }
  // What the machine or a backend refused (a port in use, a database out of reach or refusing
  // the login, a host that does not resolve): one line, as for a bad setting. Anything else is a
  // fault of fastpaste's own, and keeps its stack.
  if (isRefusal(err)) {
    console.error(`fastpaste: ${refusalMessage(err as Error)}`);
    process.exit(1);
  }
  throw err;
}
