/**
 * The client address that anonymous limits count against. Fastify already takes it from
 * X-Forwarded-For only when TRUST_PROXY is on; here it is reduced to the unit one client
 * controls: an IPv4 address, or the /64 of an IPv6 one (an IPv4-mapped address counts as IPv4).
 */
import ipaddr from 'ipaddr.js';

export function clientBucket(address: string): string {
  if (!ipaddr.isValid(address)) return `other:${address}`;
  let parsed = ipaddr.parse(address);
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).isIPv4MappedAddress()) {
    parsed = (parsed as ipaddr.IPv6).toIPv4Address();
  }
  if (parsed.kind() === 'ipv4') return `ip4:${parsed.toString()}`;
  const parts = (parsed as ipaddr.IPv6).parts.slice(0, 4).map((p) => p.toString(16));
  return `ip6:${parts.join(':')}::/64`;
}
