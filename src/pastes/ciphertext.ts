/**
 * The end-to-end wire format `fpe1:<base64(iv)>:<base64(ciphertext)>`: AES-256-GCM applied by the
 * client, a 12-byte IV, the ciphertext including its 16-byte tag. The server only checks the
 * shape; it never has the key.
 */

const STRICT_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** The decoded length of a strict (padded, canonical) base64 string, or null if it is not one. */
function strictBase64Length(text: string): number | null {
  if (!STRICT_BASE64.test(text)) return null;
  const bytes = Buffer.from(text, 'base64');
  // Canonical only: non-zero padding bits would decode the same bytes from several strings.
  if (bytes.toString('base64') !== text) return null;
  return bytes.length;
}

/** A line break at the end, as a file written by a shell or an editor ends. */
const FINAL_LINE_BREAK = /\r?\n$/;

/** Why `content` is not a valid `fpe1:` string, or null when it is. */
export function ciphertextProblem(content: string): string | null {
  if (FINAL_LINE_BREAK.test(content) && shapeProblem(content.replace(FINAL_LINE_BREAK, '')) === null) {
    return "it ends with a line break: send the fpe1: string alone (printf '%s', echo -n)";
  }
  return shapeProblem(content);
}

function shapeProblem(content: string): string | null {
  const parts = content.split(':');
  if (parts.length !== 3 || parts[0] !== 'fpe1') {
    return 'must be "fpe1:<base64 IV>:<base64 ciphertext>"';
  }
  const ivLength = strictBase64Length(parts[1] as string);
  if (ivLength === null) return 'the IV is not valid base64';
  if (ivLength !== 12) return `the IV must be 12 bytes, got ${ivLength}`;
  const bodyLength = strictBase64Length(parts[2] as string);
  if (bodyLength === null) return 'the ciphertext is not valid base64';
  if (bodyLength < 16) return 'the ciphertext is shorter than the 16-byte GCM tag';
  return null;
}
