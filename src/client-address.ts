/**
 * The client address that anonymous limits count against. Fastify already takes it from
 * X-Forwarded-For only when TRUST_PROXY is on; here it is reduced to the unit one client
 * controls: an IPv4 address, or the /64 of an IPv6 one (an IPv4-mapped address counts as IPv4),
 * without a port.
 */
import ipaddr from 'ipaddr.js';

/**
 * An address as a proxy may write it in X-Forwarded-For with the client's port (Azure's gateway
 * does): `1.2.3.4:5678` or `[2001:db8::1]:5678`. A bare IPv6 address keeps its colons.
 */
const WITH_PORT = /^(?:(\d{1,3}(?:\.\d{1,3}){3}):\d+|\[([^\]]+)\](?::\d+)?)$/;

export function clientBucket(sent: string): string {
  const withPort = WITH_PORT.exec(sent);
  const address = withPort ? ((withPort[1] ?? withPort[2]) as string) : sent;
  // One budget for every address that is none: a value that changed per request (a port, a
  // junk entry) would otherwise be a budget of its own each time.
  if (!ipaddr.isValid(address)) return 'other';
  let parsed = ipaddr.parse(address);
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).isIPv4MappedAddress()) {
    parsed = (parsed as ipaddr.IPv6).toIPv4Address();
  }
  if (parsed.kind() === 'ipv4') return `ip4:${parsed.toString()}`;
  const parts = (parsed as ipaddr.IPv6).parts.slice(0, 4).map((p) => p.toString(16));
  return `ip6:${parts.join(':')}::/64`;
}
