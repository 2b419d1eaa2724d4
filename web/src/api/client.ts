// A thin typed wrapper over fetch: paths, bodies and responses come from schema.d.ts,
// which is generated from core's OpenAPI document (`make web-client`).
import type { components, paths } from "./schema";

export type Schemas = components["schemas"];
export type Job = Schemas["JobView"];
export type JobWrite = Schemas["JobWrite"];
export type Account = Schemas["AccountView"];
export type Permission = Schemas["Permission"];
export type CallEntry = Schemas["CallEntry"];
export type Heartbeats = Schemas["Heartbeats"];
export type CallBucket = Schemas["CallBucket"];

type Method = "get" | "post" | "put" | "patch" | "delete";
type Operation<P extends keyof paths, M extends Method> = NonNullable<paths[P][M]>;
type Json<R> = R extends { content: { "application/json": infer B } } ? B : undefined;
type Success<O> = O extends { responses: infer R }
  ? 200 extends keyof R
    ? Json<R[200]>
    : 201 extends keyof R
      ? Json<R[201]>
      : undefined
  : never;
type RequestBody<O> = O extends { requestBody?: { content: { "application/json": infer B } } }
  ? B
  : never;

/** A refusal from the API: `field` is the field the message names, when it names one. */
export class ApiError extends Error {
  readonly status: number;
  readonly field: string | null;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
    this.field = errorField(message);
  }
}

/** Return the field an API error message starts with (`pool_count: must be ...`). */
export function errorField(message: string): string | null {
  const match = /^([a-z_][a-z0-9_.[\]]*)(?::| is required| must )/.exec(message);
  return match?.[1]?.replace(/[.[].*$/, "") ?? null;
}

export interface CallOptions<B> {
  params?: Record<string, string>;
  query?: Record<string, string | number | undefined>;
  body?: B;
  signal?: AbortSignal;
}

let onSignedOut: () => void = () => {
  window.location.assign(`/login?next=${encodeURIComponent(window.location.pathname)}`);
};
let onPasswordChangeRequired: () => void = () => undefined;

/** Let the session layer decide what happens when the API says the user must act. */
export function setSessionHandlers(handlers: {
  signedOut?: () => void;
  passwordChangeRequired?: () => void;
}): void {
  if (handlers.signedOut) onSignedOut = handlers.signedOut;
  if (handlers.passwordChangeRequired) onPasswordChangeRequired = handlers.passwordChangeRequired;
}

export function buildUrl(
  path: string,
  params: Record<string, string> = {},
  query: Record<string, string | number | undefined> = {},
): string {
  const filled = path.replace(/\{(\w+)\}/g, (_, name: string) =>
    encodeURIComponent(params[name] ?? ""),
  );
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value !== undefined && value !== "") search.set(key, String(value));
  }
  const text = search.toString();
  return text ? `${filled}?${text}` : filled;
}

/** Send a request without reading its body (NDJSON streams, CSV downloads). */
export async function rawFetch(url: string, init: RequestInit = {}): Promise<Response> {
  const response = await fetch(url, {
    credentials: "same-origin",
    ...init,
    headers: { Accept: "application/json", ...(init.headers ?? {}) },
  });
  // Without a session the API redirects to the sign-in page; fetch follows it and gets HTML.
  if (response.redirected && new URL(response.url).pathname === "/login") {
    onSignedOut();
    throw new ApiError(401, "Your session has ended. Sign in again.");
  }
  if (!response.ok) {
    const message = await errorMessage(response);
    if (response.status === 403 && message === "password change required") {
      onPasswordChangeRequired();
    }
    throw new ApiError(response.status, message);
  }
  return response;
}

async function errorMessage(response: Response): Promise<string> {
  const type = response.headers.get("content-type") ?? "";
  if (type.includes("json")) {
    const body: unknown = await response.json().catch(() => null);
    if (body && typeof body === "object" && "error" in body && typeof body.error === "string") {
      return body.error;
    }
  }
  return `The server answered ${response.status} ${response.statusText}.`.replace(" .", ".");
}

/** Call one API operation; resolves to its typed JSON body, or rejects with ApiError. */
export async function api<P extends keyof paths, M extends Method>(
  method: M,
  path: P,
  options: CallOptions<RequestBody<Operation<P, M>>> = {},
): Promise<Success<Operation<P, M>>> {
  const init: RequestInit = { method: method.toUpperCase(), signal: options.signal };
  if (options.body !== undefined) {
    init.body = JSON.stringify(options.body);
    init.headers = { "Content-Type": "application/json" };
  }
  const response = await rawFetch(buildUrl(path, options.params, options.query), init);
  const type = response.headers.get("content-type") ?? "";
  if (!type.includes("json")) {
    if (response.status === 204 || response.headers.get("content-length") === "0") {
      return undefined as Success<Operation<P, M>>;
    }
    // An HTML page where JSON was expected: the sign-in page behind a proxy's redirect.
    onSignedOut();
    throw new ApiError(401, "Your session has ended. Sign in again.");
  }
  return (await response.json()) as Success<Operation<P, M>>;
}
