/**
 * A hot query built and compiled by Kysely once, then run with new values: the builder is
 * called with sentinel arguments, and each sentinel's place in the compiled parameters is
 * filled with the real value at run time. Saves the query building and compiling (tens of
 * microseconds) on the paths every read takes; the SQL is still Kysely's, for either dialect.
 *
 * Given the PostgreSQL pool, the query runs on it as a named statement: each connection parses
 * and plans it once, not on every run (Kysely sends it unnamed), and describes its rows once
 * (described-statement.ts). The SQL must then name its columns (no `*`): a prepared statement
 * whose row type changes (a column added by a newer instance's migration) fails instead of
 * re-planning.
 *
 * Given the SQLite handle, the statement is prepared once and run on it directly, without
 * Kysely's connection queue, except while a transaction is open on that connection (a group
 * commit between two of its statements): the read then waits its turn through Kysely, so it never
 * sees a row that is not committed yet.
 */
import { createHash } from 'node:crypto';
import type BetterSqlite3 from 'better-sqlite3';
import type { Compilable, CompiledQuery, Kysely } from 'kysely';
import type pg from 'pg';
import { runDescribed } from './described-statement.js';
import { answeredByServer, checkOut } from './pg-sessions.js';
import { rowObjects } from './row-objects.js';

type Arg = string | number;

export interface PreparedQuery<A extends Arg[], R> {
  (...args: A): Promise<R[]>;
  /**
   * The rows at once, when the SQLite handle can run the statement now (no transaction open on
   * it); undefined otherwise (PostgreSQL, or a transaction open): call the query itself then.
   */
  now(...args: A): R[] | undefined;
  /**
   * The first row at once (null when there is none) under the same conditions as now(); for
   * point reads, which then step SQLite once and build no list (2–3 µs of a 1 KB read).
   */
  first(...args: A): R | null | undefined;
}

/** A `*` in a select list or RETURNING, however spaced, after DISTINCT or DISTINCT ON too. */
const STAR = /(\.\*|\bselect\s+(distinct\s+(on\s*\([^)]*\)\s*)?)?\*|,\s*\*|\breturning\s+\*)/i;

/** A named statement: `name` moves to a new generation when the prepared one stops standing. */
interface Named {
  pool: pg.Pool;
  base: string;
  generation: number;
  name: string;
  text: string;
}

/**
 * Runs a named statement on a client of the pool. The client goes back to the pool after an error
 * the server answered (a statement timeout, a constraint), as Kysely returns it; it is closed
 * after anything else (a connection lost, a client-side timeout), and after a refused write on a
 * server that takes no writes (pg-sessions.ts). The two errors that mean the
 * prepared statement no longer stands (0A000: its row type changed under it, another instance's
 * migration; 26000: it is gone) give the statement a new name, which every connection then
 * prepares anew, and the query runs once more under it: the caller never sees those.
 */
async function runNamed<R>(named: Named, values: unknown[], retry = true): Promise<R[]> {
  const name = named.name;
  const client = await checkOut(named.pool);
  try {
    const rows = await runDescribed<R>(client, name, named.text, values);
    client.release();
    return rows;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    client.release(answeredByServer(err) ? undefined : (err as Error));
    if ((code === '0A000' || code === '26000') && retry) {
      if (named.name === name) named.name = `${named.base}_${++named.generation}`;
      return runNamed(named, values, false);
    }
    throw err;
  }
}

/** A named statement of this text on the pool, named by its digest. */
function namedOnPool(pool: pg.Pool, text: string): Named {
  const base = `fp_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
  return { pool, base, generation: 0, name: base, text };
}

/**
 * A statement written for PostgreSQL alone (one Kysely cannot build, or should not build on
 * every run), run as a named statement on the pool as preparedQuery runs its own: parsed,
 * planned and described once a connection, given a new name should it stop standing.
 */
export function namedStatement<R>(pool: pg.Pool, text: string): (values: unknown[]) => Promise<R[]> {
  if (STAR.test(text)) throw new Error(`namedStatement: name the columns of a named statement: ${text}`);
  const named = namedOnPool(pool, text);
  return (values) => runNamed<R>(named, values);
}

export function preparedQuery<A extends Arg[], R>(
  // biome-ignore lint/suspicious/noExplicitAny: any schema
  db: Kysely<any>,
  kinds: { [K in keyof A]: A[K] extends number ? 'number' : 'string' },
  build: (...args: A) => Compilable<R>,
  sqlite: BetterSqlite3.Database | null = null,
  pgPool: pg.Pool | null = null,
): PreparedQuery<A, R> {
  const sentinels = (kinds as string[]).map((kind, i) =>
    kind === 'number' ? -7_000_000_000_001 - i : `\u0000sentinel${i}\u0000`,
  ) as A;
  const compiled = build(...sentinels).compile();
  const slots = compiled.parameters.map((value) => sentinels.indexOf(value as Arg));
  for (let i = 0; i < sentinels.length; i++) {
    if (!slots.includes(i)) throw new Error(`preparedQuery: argument ${i} does not reach the SQL`);
  }
  if (pgPool && STAR.test(compiled.sql)) {
    throw new Error(`preparedQuery: name the columns of a named statement: ${compiled.sql}`);
  }
  const named = pgPool ? namedOnPool(pgPool, compiled.sql) : null;
  const statement = sqlite?.prepare(compiled.sql);
  // Rows come from SQLite as arrays and are made into objects here: better-sqlite3 building each
  // row object natively cost a third of a 20-row list query.
  const asObjects = statement?.reader === true;
  const names = asObjects
    ? (statement as BetterSqlite3.Statement)
        .raw(true)
        .columns()
        .map((column) => column.name)
    : [];
  // One object literal made from the column names (row-objects.ts).
  const toObject = rowObjects<R>(names);
  const parametersOf = (args: A) =>
    compiled.parameters.map((value, i) => {
      const slot = slots[i] as number;
      return slot >= 0 ? args[slot] : value;
    });
  const now = (...args: A): R[] | undefined => {
    if (!statement || sqlite?.inTransaction) return undefined;
    const rows = statement.all(...parametersOf(args));
    return asObjects ? (rows as unknown[][]).map(toObject) : (rows as R[]);
  };
  const first = (...args: A): R | null | undefined => {
    if (!statement || sqlite?.inTransaction) return undefined;
    const values = statement.get(...parametersOf(args));
    if (values === undefined) return null;
    return asObjects ? toObject(values as unknown[]) : (values as R);
  };
  const query = async (...args: A): Promise<R[]> => {
    const rows = now(...args);
    if (rows) return rows;
    if (named) return runNamed<R>(named, parametersOf(args));
    const result = await db.executeQuery<R>({ ...compiled, parameters: parametersOf(args) } as CompiledQuery<R>);
    return result.rows;
  };
  return Object.assign(query, { now, first });
}
