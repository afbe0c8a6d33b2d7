/**
 * The webhook address guard (D21): only http and https, and by default no loopback, private,
 * link-local, CGNAT, unique-local, multicast, reserved or unspecified address, whatever the
 * spelling (`127.1`, `0x7f.1`, `2130706433`, `[::ffff:127.0.0.1]`, `[::]`). Checked when a URL
 * is set (every address its name resolves to) and again at connection time by the delivery
 * agent (request-filtering-agent, which checks the address actually connected to, so DNS
 * rebinding fails), plus a literal check here, because an IP literal is never looked up.
 */

import dns from 'node:dns';
import { lookup } from 'node:dns/promises';
import ipaddr from 'ipaddr.js';
import { withoutCredentials } from '../config.js';
import { AppError } from '../errors.js';

/**
 * Public unicast addresses that are a cloud's own internal endpoints, reachable from every machine
 * it runs: Azure's platform address (WireServer, its DNS and health probes). The metadata
 * services of the others sit in ranges refused anyway (169.254.169.254, 100.100.100.200, fd00:ec2::254).
 */
const PLATFORM_ADDRESSES = new Set(['168.63.129.16']);

/** Why an address may not be called, or null when it is a public unicast address. */
export function forbiddenAddressReason(address: string): string | null {
  const text = address.replace(/^\[|\]$/g, '');
  if (!ipaddr.isValid(text)) return 'is not an IP address';
  const parsed = ipaddr.parse(text);
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).isIPv4MappedAddress()) {
    // The connection-time check (request-filtering-agent) refuses every IPv4-mapped address:
    // refused here too, so that a URL accepted when set is one a delivery may reach.
    const v4 = (parsed as ipaddr.IPv6).toIPv4Address().toString();
    return `is an IPv4-mapped IPv6 address${forbiddenAddressReason(v4) === null ? ` (give ${v4} itself)` : ` of ${v4}, which ${forbiddenAddressReason(v4)}`}`;
  }
  // ::/96, the IPv4-compatible addresses RFC 4291 deprecated ([::127.0.0.1]): never a receiver.
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).parts.slice(0, 6).every((part) => part === 0)) {
    return 'is an IPv4-compatible IPv6 address';
  }
  if (PLATFORM_ADDRESSES.has(parsed.toString())) return "is a cloud platform's internal address";
  const range = parsed.range();
  return range === 'unicast' ? null : `is a ${range} address`;
}

/** The URL's host when it is an IP literal (the WHATWG parser has already normalised it). */
function literalHost(url: URL): string | null {
  const host = url.hostname.replace(/^\[|\]$/g, '');
  return ipaddr.isValid(host) ? host : null;
}

export interface GuardOptions {
  /** WEBHOOK_ALLOW_PRIVATE: lifts the address rules, for development and tests. */
  allowPrivate: boolean;
}

/** Parses and checks a URL's shape and, for an IP literal, its address. Throws 400. */
export function checkWebhookUrlSyntax(raw: string, options: GuardOptions): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    // Not parsed, so not refused for its credentials yet: they are not shown.
    throw new AppError('invalid_request', `The webhook URL "${withoutCredentials(raw)}" is not a URL.`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new AppError('invalid_request', 'A webhook URL must use http or https.');
  }
  if (url.username || url.password) {
    throw new AppError('invalid_request', 'A webhook URL may not carry a user name or password.');
  }
  const literal = literalHost(url);
  if (literal && !options.allowPrivate) {
    const reason = forbiddenAddressReason(literal);
    if (reason) throw new AppError('invalid_request', `The webhook address ${url.hostname} ${reason}.`);
  }
  return url;
}

/** Checks a URL when it is set: its shape, and every address its host name resolves to now. */
export async function checkWebhookUrl(raw: string, options: GuardOptions): Promise<URL> {
  const url = checkWebhookUrlSyntax(raw, options);
  if (options.allowPrivate || literalHost(url)) return url;
  let addresses: Array<{ address: string }>;
  try {
    addresses = await lookup(url.hostname, { all: true });
  } catch {
    throw new AppError('invalid_request', `The webhook host ${url.hostname} does not resolve.`);
  }
  for (const { address } of addresses) {
    const reason = forbiddenAddressReason(address);
    if (reason)
      throw new AppError(
        'invalid_request',
        `The webhook host ${url.hostname} resolves to ${address}, which ${reason}.`,
      );
  }
  return url;
}

/** dns.lookup's shape, as net.connect calls it (with `all` under Node 20's family selection). */
export type Lookup = (
  hostname: string,
  options: dns.LookupOptions,
  callback: (err: NodeJS.ErrnoException | null, address: string | dns.LookupAddress[], family?: number) => void,
) => void;

/**
 * The connection's name lookup, refusing an answer that holds an address forbiddenAddressReason
 * refuses: the check at connection time, after DNS, so a name that resolved to a public address
 * when the URL was set and to an internal one now (rebinding) is refused. The request-filtering
 * agent checks the address's range too; this adds what its rules let through (::/96, the
 * IPv4-compatible addresses), which its own deny list cannot: matching that list against an IPv4
 * address makes it print a warning and a stack to stderr on every delivery.
 */
export function refusingLookup(resolve: Lookup = dns.lookup as unknown as Lookup): Lookup {
  return (hostname, options, callback) => {
    resolve(hostname, options, (err, address, family) => {
      if (err) {
        callback(err, address, family);
        return;
      }
      for (const one of Array.isArray(address) ? address.map((entry) => entry.address) : [address]) {
        const reason = forbiddenAddressReason(one);
        if (reason !== null) {
          callback(
            Object.assign(new Error(`${hostname} resolves to ${one}, which ${reason}`), { code: 'EADDRNOTALLOWED' }),
            address,
            family,
          );
          return;
        }
      }
      callback(null, address, family);
    });
  };
}

/**
 * Lookups by `resolve`, at most `most` at a time however many callers, and one at a time of each
 * name: the lookup it returns for a wait of `waitMs` waits for its turn, and fails (ETIMEOUT)
 * without being made once it has waited `waitMs`. dns.lookup (getaddrinfo) runs on libuv's
 * thread pool (4 threads), shared with the password hashes, the file system and pg's own host
 * lookups, and cannot be cancelled: a receiver whose name servers never answer holds a thread
 * until the system resolver gives up (10 s and more), past the attempt's time-out. Unbounded,
 * such a key's attempts took every thread, and every protected read and write waited behind
 * them; one name at a time, such a name holds one turn, and other receivers' lookups take the rest.
 */
export function lookupTurns(resolve: Lookup, most: number): (waitMs: number) => Lookup {
  let running = 0;
  const busy = new Set<string>();
  const waiting: Array<{ hostname: string; run: () => void; timer: NodeJS.Timeout }> = [];
  const next = () => {
    for (let i = 0; i < waiting.length && running < most; ) {
      const turn = waiting[i] as (typeof waiting)[number];
      if (busy.has(turn.hostname)) {
        i++;
        continue;
      }
      waiting.splice(i, 1);
      clearTimeout(turn.timer);
      turn.run();
    }
  };
  return (waitMs) => (hostname, options, callback) => {
    const run = () => {
      running++;
      busy.add(hostname);
      let ended = false;
      const end = () => {
        if (ended) return false;
        ended = true;
        running--;
        busy.delete(hostname);
        next();
        return true;
      };
      try {
        resolve(hostname, options, (err, address, family) => {
          if (end()) callback(err, address, family); // once, whatever the resolver does
        });
      } catch (err) {
        if (end()) callback(err as NodeJS.ErrnoException, '');
      }
    };
    const timer = setTimeout(() => {
      const at = waiting.indexOf(turn);
      if (at < 0) return; // started meanwhile
      waiting.splice(at, 1);
      callback(
        Object.assign(new Error(`the lookup of ${hostname} waited ${waitMs} ms for its turn`), { code: 'ETIMEOUT' }),
        '',
      );
    }, waitMs);
    const turn = { hostname, run, timer };
    waiting.push(turn);
    next();
  };
}
