// The wizard's field logic, kept free of React so Vitest can pin it down: the draft a form
// edits, the exact JSON it sends, which step owns a field, and the plain-words explanations.
import type { Job, JobWrite } from "../api/client";

export type JobType = JobWrite["job_type"] & string;
export type ScheduleType = JobWrite["schedule_type"] & string;
export const SCRIPT_TYPES: JobType[] = ["bash", "javascript", "typescript", "groovy", "python"];
export const JOB_TYPES: JobType[] = ["http", ...SCRIPT_TYPES];
export const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

export type Step = "type" | "basics" | "request" | "script" | "behaviour" | "notify" | "review";

export interface Pair {
  key: string;
  value: string;
}

/** What the form edits: the API's fields, with maps as editable rows and the body as text. */
export interface Draft {
  job_type: JobType;
  name: string;
  group_name: string;
  enabled: boolean;
  schedule_type: ScheduleType;
  cron_expression: string;
  timezone: string;
  run_at: string; // local datetime-local value, "" when unset
  one_off_after_run: string;
  http_method: string;
  url: string;
  query: Pair[];
  headers: Pair[];
  body_text: string;
  auth_type: NonNullable<JobWrite["auth_type"]>;
  auth_config: Record<string, string>;
  script_body: string;
  script_args: string[];
  script_secret_vars: string[];
  volumes: { name: string; mode: "ro" | "rw" }[];
  exec_timeout_ms: number;
  pool_count: number;
  overlap_policy: NonNullable<JobWrite["overlap_policy"]>;
  loop_enabled: boolean;
  loop_response_path: string;
  loop_delay_ms: number;
  loop_jitter_ms: number;
  loop_max_iterations: number;
  retry_enabled: boolean;
  retry_mode: NonNullable<JobWrite["retry_mode"]>;
  retry_base_delay_ms: number;
  retry_multiplier: number;
  retry_max_delay_ms: number;
  retry_max_attempts: number;
  on_failure_url: string;
  notify_on: NonNullable<JobWrite["notify_on"]>;
  notify_all_targets: boolean;
  notify_targets: number[];
  notify_after_failures: number;
  notify_reminder_minutes: number;
}

export function isScript(type: JobType): boolean {
  return type !== "http";
}

export function newDraft(type: JobType = "http"): Draft {
  return {
    job_type: type,
    name: "",
    group_name: "",
    enabled: true,
    schedule_type: "cron",
    cron_expression: "*/5 * * * *",
    timezone: "",
    run_at: "",
    one_off_after_run: "keep",
    http_method: "GET",
    url: "",
    query: [],
    headers: [],
    body_text: "",
    auth_type: "none",
    auth_config: {},
    script_body: "",
    script_args: [],
    script_secret_vars: [],
    volumes: [],
    exec_timeout_ms: type === "groovy" ? 30_000 : 60_000,
    pool_count: 1,
    overlap_policy: "skip",
    loop_enabled: false,
    loop_response_path: "result.remaining",
    loop_delay_ms: 1000,
    loop_jitter_ms: 0,
    loop_max_iterations: 50,
    retry_enabled: true,
    retry_mode: "exponential",
    retry_base_delay_ms: 1000,
    retry_multiplier: 2,
    retry_max_delay_ms: 30_000,
    retry_max_attempts: 5,
    on_failure_url: "",
    notify_on: "none",
    notify_all_targets: false,
    notify_targets: [],
    notify_after_failures: 1,
    notify_reminder_minutes: 0,
  };
}

const toPairs = (map: Record<string, string> | undefined): Pair[] =>
  Object.entries(map ?? {}).map(([key, value]) => ({ key, value }));
const fromPairs = (pairs: Pair[]): Record<string, string> =>
  Object.fromEntries(pairs.filter((p) => p.key.trim() !== "").map((p) => [p.key.trim(), p.value]));

/** Turn an ISO instant into the `datetime-local` value for the browser's zone. */
export function toLocalInput(iso: string | null | undefined): string {
  if (!iso) return "";
  const date = new Date(iso);
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}`;
}

/** Build a draft from a stored job (edit, duplicate). Write-only secrets come back empty. */
export function draftFromJob(job: Job): Draft {
  const base = newDraft(job.job_type as JobType);
  const volumes = (job.capabilities as { volumes?: Draft["volumes"] } | undefined)?.volumes ?? [];
  return {
    ...base,
    job_type: job.job_type as JobType,
    name: job.name,
    group_name: job.group_name,
    enabled: job.enabled,
    schedule_type: job.schedule_type as ScheduleType,
    cron_expression: job.cron_expression,
    timezone: job.timezone,
    run_at: toLocalInput(job.run_at),
    one_off_after_run: job.one_off_after_run,
    http_method: job.http_method || "GET",
    url: job.url,
    query: toPairs(job.query_params as Record<string, string>),
    headers: toPairs(job.headers as Record<string, string>),
    body_text: job.body === null || job.body === undefined ? "" : JSON.stringify(job.body, null, 2),
    auth_type: job.auth_type as Draft["auth_type"],
    auth_config: Object.fromEntries(
      Object.entries((job.auth_config ?? {}) as Record<string, unknown>).map(([k, v]) => [
        k,
        typeof v === "string" && v !== "REDACTED" ? v : "",
      ]),
    ),
    script_body: job.script_body,
    script_args: job.script_args,
    script_secret_vars: job.script_secret_vars,
    volumes,
    exec_timeout_ms: job.exec_timeout_ms,
    pool_count: job.pool_count,
    overlap_policy: job.overlap_policy as Draft["overlap_policy"],
    loop_enabled: job.loop_enabled,
    loop_response_path: job.loop_response_path,
    loop_delay_ms: job.loop_delay_ms,
    loop_jitter_ms: job.loop_jitter_ms,
    loop_max_iterations: job.loop_max_iterations,
    retry_enabled: job.retry_enabled,
    retry_mode: job.retry_mode as Draft["retry_mode"],
    retry_base_delay_ms: job.retry_base_delay_ms,
    retry_multiplier: job.retry_multiplier,
    retry_max_delay_ms: job.retry_max_delay_ms,
    retry_max_attempts: job.retry_max_attempts,
    on_failure_url: job.on_failure_url,
    notify_on: (job.notify_on ?? "none") as Draft["notify_on"],
    // Absent when the reader lacks notify:read; the server then keeps the stored values.
    notify_all_targets: job.notify_all_targets ?? base.notify_all_targets,
    notify_targets: job.notify_targets ?? base.notify_targets,
    notify_after_failures: job.notify_after_failures ?? base.notify_after_failures,
    notify_reminder_minutes: job.notify_reminder_minutes ?? base.notify_reminder_minutes,
  };
}

/** Parse the body text: undefined when empty, or an error message naming the problem. */
export function parseBody(text: string): { value?: unknown; error?: string } {
  if (text.trim() === "") return {};
  try {
    return { value: JSON.parse(text) as unknown };
  } catch (error) {
    return { error: `body: not valid JSON (${(error as Error).message})` };
  }
}

/** Checks the browser can make before sending, each keyed by the field it concerns. */
export function localErrors(draft: Draft): Record<string, string> {
  const errors: Record<string, string> = {};
  if (draft.name.trim() === "") errors.name = "name is required";
  if (!isScript(draft.job_type)) {
    if (draft.url.trim() === "") errors.url = "url is required";
    const body = parseBody(draft.body_text);
    if (body.error) errors.body = body.error;
  } else if (draft.script_body.trim() === "") {
    errors.script_body = "script_body is required";
  }
  if (draft.schedule_type === "one_off" && draft.run_at === "")
    errors.run_at = "run_at is required";
  if (draft.pool_count < 1 || draft.pool_count > 20) errors.pool_count = "must be 1 to 20";
  return errors;
}

/** The exact JSON the wizard sends to create or replace the job. */
export function toPayload(draft: Draft): JobWrite {
  const script = isScript(draft.job_type);
  const payload: JobWrite = {
    job_type: draft.job_type,
    name: draft.name.trim(),
    group_name: draft.group_name.trim(),
    enabled: draft.enabled,
    schedule_type: draft.schedule_type,
    timezone: draft.timezone,
    exec_timeout_ms: draft.exec_timeout_ms,
    pool_count: draft.schedule_type === "one_off" ? 1 : draft.pool_count,
    overlap_policy: draft.overlap_policy,
    loop_enabled: draft.loop_enabled,
    loop_response_path: draft.loop_response_path,
    loop_delay_ms: draft.loop_delay_ms,
    loop_jitter_ms: draft.loop_jitter_ms,
    loop_max_iterations: draft.loop_max_iterations,
    retry_enabled: draft.retry_enabled,
    retry_mode: draft.retry_mode,
    retry_base_delay_ms: draft.retry_base_delay_ms,
    retry_multiplier: draft.retry_multiplier,
    retry_max_delay_ms: draft.retry_max_delay_ms,
    retry_max_attempts: draft.retry_max_attempts,
    on_failure_url: draft.on_failure_url.trim(),
    notify_on: draft.notify_on,
    notify_all_targets: draft.notify_all_targets,
    notify_targets: draft.notify_targets,
    notify_after_failures: draft.notify_after_failures,
    notify_reminder_minutes: draft.notify_reminder_minutes,
  };
  if (draft.schedule_type === "cron" || draft.schedule_type === "rate") {
    payload.cron_expression = draft.cron_expression.trim();
  }
  if (draft.schedule_type === "one_off") {
    payload.run_at = draft.run_at ? new Date(draft.run_at).toISOString() : null;
    payload.one_off_after_run = draft.one_off_after_run;
  }
  if (script) {
    payload.script_body = draft.script_body;
    payload.script_args = draft.script_args.filter((a) => a !== "");
    payload.script_secret_vars = draft.script_secret_vars.filter((a) => a !== "");
    if (draft.volumes.length > 0) payload.capabilities = { volumes: draft.volumes };
  } else {
    payload.http_method = draft.http_method;
    payload.url = draft.url.trim();
    payload.query_params = fromPairs(draft.query);
    payload.headers = fromPairs(draft.headers);
    const body = parseBody(draft.body_text);
    if (body.value !== undefined) payload.body = body.value;
    payload.auth_type = draft.auth_type;
    // Empty secrets are left out so that an edit keeps the stored ones.
    const auth = Object.fromEntries(Object.entries(draft.auth_config).filter(([, v]) => v !== ""));
    if (draft.auth_type !== "none") payload.auth_config = auth;
  }
  return payload;
}

const STEP_OF_FIELD: Record<string, Step> = {
  job_type: "type",
  name: "basics",
  group_name: "basics",
  schedule_type: "basics",
  cron_expression: "basics",
  timezone: "basics",
  run_at: "basics",
  one_off_after_run: "basics",
  http_method: "request",
  url: "request",
  query_params: "request",
  headers: "request",
  body: "request",
  auth_type: "request",
  auth_config: "request",
  script_body: "script",
  script_args: "script",
  script_secret_vars: "script",
  capabilities: "script",
  exec_timeout_ms: "behaviour",
  pool_count: "behaviour",
  overlap_policy: "behaviour",
  on_failure_url: "behaviour",
  notify_on: "notify",
  notify_targets: "notify",
  notify_all_targets: "notify",
  notify_after_failures: "notify",
  notify_reminder_minutes: "notify",
};

/** The step that shows `field`; loop_* and retry_* fields live on the behaviour step. */
export function stepOfField(field: string): Step {
  if (field.startsWith("loop_") || field.startsWith("retry_")) return "behaviour";
  return STEP_OF_FIELD[field] ?? "review";
}

export function stepsFor(type: JobType): Step[] {
  return ["type", "basics", isScript(type) ? "script" : "request", "behaviour", "notify", "review"];
}

/** `1500` → `1.5 s`, `90000` → `1 min 30 s`, `0` → `0 s`. */
export function formatDuration(ms: number): string {
  if (ms < 1000) return ms === 0 ? "0 s" : `${ms} ms`;
  const seconds = ms / 1000;
  if (seconds < 60) return `${Number(seconds.toFixed(1))} s`;
  const minutes = Math.floor(seconds / 60);
  const rest = Math.round(seconds - minutes * 60);
  if (minutes < 60) return rest ? `${minutes} min ${rest} s` : `${minutes} min`;
  const hours = Math.floor(minutes / 60);
  const mins = minutes - hours * 60;
  return mins ? `${hours} h ${mins} min` : `${hours} h`;
}

/** The waits before each retry, as the worker computes them (docs/jobs.md, Retry modes). */
export function retryDelays(draft: Draft): number[] {
  const attempts = draft.retry_max_attempts > 0 ? draft.retry_max_attempts : 5;
  const base = draft.retry_base_delay_ms > 0 ? draft.retry_base_delay_ms : 1000;
  const multiplier = draft.retry_multiplier > 1 ? draft.retry_multiplier : 2;
  const max = draft.retry_max_delay_ms > 0 ? draft.retry_max_delay_ms : 300_000;
  const delays: number[] = [];
  for (let attempt = 1; attempt < attempts; attempt++) {
    const delay =
      draft.retry_mode === "fixed" ? base : Math.round(base * multiplier ** (attempt - 1));
    delays.push(Math.min(delay, max));
  }
  return delays;
}

export function retryExplanation(draft: Draft): string {
  if (!draft.retry_enabled) return "A failed run is not retried: it ends at its first failure.";
  const delays = retryDelays(draft);
  const attempts = delays.length + 1;
  if (delays.length === 0) return "Only one attempt: a failure ends the run.";
  const shown = delays.slice(0, 6).map(formatDuration);
  const more = delays.length > 6 ? ", …" : "";
  const jitter = draft.retry_mode === "exponential_jitter" ? "up to " : "";
  return `Retries after ${jitter}${shown.join(", ")}${more}; gives up after ${attempts} attempts.`;
}

const ORDINAL_SUFFIX: Record<number, string> = { 1: "st", 2: "nd", 3: "rd" };
const ordinal = (n: number): string => {
  const teen = n % 100 >= 11 && n % 100 <= 13;
  return `${n}${teen ? "th" : (ORDINAL_SUFFIX[n % 10] ?? "th")}`;
};

/** What the notify settings will do, in one sentence. */
export function notifyExplanation(draft: Draft): string {
  if (draft.notify_on === "none") return "No notices for this job's runs.";
  const to = draft.notify_all_targets
    ? "every target"
    : draft.notify_targets.length === 0
      ? "no target yet (choose some, or every target)"
      : `${draft.notify_targets.length} chosen target${draft.notify_targets.length === 1 ? "" : "s"}`;
  const parts: string[] = [];
  if (draft.notify_on === "success" || draft.notify_on === "both")
    parts.push("each successful run");
  if (draft.notify_on === "failure" || draft.notify_on === "both") {
    const first =
      draft.notify_after_failures <= 1
        ? "each failed run"
        : `the ${ordinal(draft.notify_after_failures)} failed run in a row`;
    const then =
      draft.notify_after_failures > 1 || draft.notify_reminder_minutes > 0
        ? draft.notify_reminder_minutes > 0
          ? `, then at most every ${formatDuration(draft.notify_reminder_minutes * 60_000)} while it keeps failing`
          : ", then each further failed run"
        : "";
    parts.push(`${first}${then}, and when it recovers`);
  }
  return `Notifies ${to} of ${parts.join("; and of ")}.`;
}

export function loopExplanation(draft: Draft): string {
  if (!draft.loop_enabled) return "Each run makes one call.";
  const jitter =
    draft.loop_jitter_ms > 0 ? ` plus up to ${formatDuration(draft.loop_jitter_ms)}` : "";
  return (
    `After each success, reads ${draft.loop_response_path || "result.remaining"} from the ` +
    `response; while it is a number above 0 the job calls again after ` +
    `${formatDuration(draft.loop_delay_ms)}${jitter}, at most ${draft.loop_max_iterations} calls in a run.`
  );
}

export function poolExplanation(draft: Draft): string {
  const n = draft.schedule_type === "one_off" ? 1 : draft.pool_count;
  const calls = n === 1 ? "one attempt" : `${n} attempts side by side (pool indexes 0 to ${n - 1})`;
  const overlap =
    draft.overlap_policy === "skip"
      ? "a member still running when the next fire comes is skipped for that fire"
      : "a new fire starts even while the previous one still runs";
  return `Each fire starts ${calls}; ${overlap}.`;
}

export function timeoutExplanation(draft: Draft): string {
  return `An attempt that takes longer than ${formatDuration(draft.exec_timeout_ms)} is stopped and counts as failed.`;
}
