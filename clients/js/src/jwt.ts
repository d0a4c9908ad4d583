/**
 * The `sub` claim of a JWT: the user a Pulse user token acts for. The token is only
 * decoded, not verified: the server verifies it, and the client needs the user id
 * only to fill in the events it posts for that same user.
 *
 * @throws Error when the token is not a JWT or has no string `sub`.
 */
export function subjectOf(token: string): string {
  const parts = token.split(".");
  if (parts.length !== 3 || !parts[1]) {
    throw new Error("the token is not a JWT (header.payload.signature): pass userId explicitly");
  }
  let claims: unknown;
  try {
    claims = JSON.parse(decodeBase64Url(parts[1]));
  } catch (err) {
    throw new Error("the token's payload is not base64url-encoded JSON", { cause: err });
  }
  const sub = (claims as { sub?: unknown } | null)?.sub;
  if (typeof sub !== "string" || sub === "") {
    throw new Error("the token has no sub claim: pass userId explicitly");
  }
  return sub;
}

/** base64url (RFC 4648 §5, padding optional) to a UTF-8 string, with atob alone. */
function decodeBase64Url(s: string): string {
  const b64 = s.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(s.length / 4) * 4, "=");
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
}
