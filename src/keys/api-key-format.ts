/**
 * The shape of an API key (D19): `fp_` + 43 base62 characters (256 bits from the CSPRNG) + a
 * 6-character checksum. The prefix lets secret scanners find leaked keys; the checksum refuses a
 * mistyped key without a database look-up. Only the SHA-256 digest is ever stored.
 */
import { hash } from 'node:crypto';
import { randomBase62 } from '../pastes/paste-ids.js';

const PREFIX = 'fp_';
const BODY_LENGTH = 43;
const CHECKSUM_LENGTH = 6;
const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const KEY_PATTERN = new RegExp(`^${PREFIX}[0-9A-Za-z]{${BODY_LENGTH + CHECKSUM_LENGTH}}$`);

function checksum(body: string): string {
  let value = hash('sha256', body, 'buffer').readUInt32BE(0);
  let out = '';
  for (let i = 0; i < CHECKSUM_LENGTH; i++) {
    out = BASE62[value % 62] + out;
    value = Math.floor(value / 62);
  }
  return out;
}

export function generateApiKey(): string {
  const body = randomBase62(BODY_LENGTH);
  return `${PREFIX}${body}${checksum(body)}`;
}

/** True when the key has the right shape and its checksum matches. */
export function isWellFormedApiKey(key: string): boolean {
  if (!KEY_PATTERN.test(key)) return false;
  const body = key.slice(PREFIX.length, PREFIX.length + BODY_LENGTH);
  return key.slice(PREFIX.length + BODY_LENGTH) === checksum(body);
}

/** What is stored in place of the key. */
export function apiKeyDigest(key: string): string {
  return hash('sha256', key, 'hex');
}
