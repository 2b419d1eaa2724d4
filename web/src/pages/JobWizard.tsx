import { useEffect, useMemo, useState } from "react";
import { api, ApiError, type Job, type Schemas } from "../api/client";
import { CodeEditor } from "../components/CodeEditor";
import { Denied, errorText, Notice } from "../components/States";
import { localTime } from "../format";
import { Link, navigate } from "../router";
import { usePermission } from "../session";
import {
  draftFromJob,
  JOB_TYPES,
  localErrors,
  loopExplanation,
  METHODS,
  notifyExplanation,
  newDraft,
  poolExplanation,
  retryExplanation,
  stepOfField,
  stepsFor,
  timeoutExplanation,
  toPayload,
  type Draft,
  type Pair,
  type Step,
} from "../wizard/logic";

const STEP_TITLES: Record<Step, string> = {
  type: "Type",
  basics: "Basics",
  request: "Request",
  script: "Script",
  behaviour: "Loop, retry, pool",
  notify: "Notify",
  review: "Review",
};

type Errors = Record<string, string>;

function FieldError(props: { errors: Errors; field: string }) {
  const text = props.errors[props.field];
  if (!text) return null;
  return (
    <span className="field-error" role="alert" id={`error-${props.field}`}>
      {text}
    </span>
  );
}

function Pairs(props: { label: string; pairs: Pair[]; onChange: (pairs: Pair[]) => void }) {
  return (
    <fieldset>
      <legend>{props.label}</legend>
      {props.pairs.map((pair, index) => (
        <div className="row" key={index}>
          <input
            aria-label={`${props.label} name ${index + 1}`}
            value={pair.key}
            onChange={(e) =>
              props.onChange(
                props.pairs.map((p, i) => (i === index ? { ...p, key: e.target.value } : p)),
              )
            }
          />
          <input
            aria-label={`${props.label} value ${index + 1}`}
            value={pair.value}
            onChange={(e) =>
              props.onChange(
                props.pairs.map((p, i) => (i === index ? { ...p, value: e.target.value } : p)),
              )
            }
          />
          <button
            type="button"
            className="link"
            onClick={() => props.onChange(props.pairs.filter((_, i) => i !== index))}
          >
            Remove
          </button>
        </div>
      ))}
      <button
        type="button"
        className="secondary"
        onClick={() => props.onChange([...props.pairs, { key: "", value: "" }])}
      >
        Add {props.label.toLowerCase().replace(/s$/, "")}
      </button>
    </fieldset>
  );
}

type Target = Schemas["TargetView"];
type SetField = <K extends keyof Draft>(key: K, value: Draft[K]) => void;

/** Who hears about this job's runs, and when. Listing the targets (their names) needs
 * notify_settings:read; without it the job's own target ids are shown instead. */
function NotifyStep(props: { draft: Draft; errors: Errors; set: SetField; denied: string | null }) {
  const { draft, errors, set, denied } = props;
  const readDenied = usePermission("notify_settings:read");
  const [targets, setTargets] = useState<Target[] | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  useEffect(() => {
    if (readDenied) return;
    api("get", "/api/notify/targets")
      .then(setTargets)
      .catch((error: unknown) => setLoadError(errorText(error)));
  }, [readDenied]);
  if (denied) return <p className="hint">Notify settings are kept as they are. {denied}</p>;
  const toggle = (id: number, on: boolean) =>
    set(
      "notify_targets",
      on ? [...draft.notify_targets, id] : draft.notify_targets.filter((t) => t !== id),
    );
  return (
    <>
      <label>
        Notify
        <select
          value={draft.notify_on}
          onChange={(e) => set("notify_on", e.target.value as Draft["notify_on"])}
        >
          <option value="none">never</option>
          <option value="failure">when a run fails</option>
          <option value="success">when a run succeeds</option>
          <option value="both">after every run</option>
        </select>
        <FieldError errors={errors} field="notify_on" />
      </label>
      {draft.notify_on !== "none" && (
        <>
          <label className="choice">
            <input
              type="checkbox"
              checked={draft.notify_all_targets}
              onChange={(e) => set("notify_all_targets", e.target.checked)}
            />
            Send to every target
          </label>
          {!draft.notify_all_targets && (
            <fieldset>
              <legend>Targets</legend>
              {readDenied && (
                <p className="hint">
                  Target names are hidden: {readDenied} The job's own targets are listed by id.
                </p>
              )}
              {readDenied &&
                draft.notify_targets.map((id) => (
                  <label className="choice" key={id}>
                    <input type="checkbox" checked onChange={() => toggle(id, false)} />
                    target {id}
                  </label>
                ))}
              {loadError && <p className="error">The targets could not be loaded: {loadError}</p>}
              {targets?.length === 0 && <p className="hint">No notification targets yet.</p>}
              {targets?.map((target) => (
                <label className="choice" key={target.id}>
                  <input
                    type="checkbox"
                    checked={draft.notify_targets.includes(target.id)}
                    onChange={(e) => toggle(target.id, e.target.checked)}
                  />
                  {target.name} ({target.kind})
                </label>
              ))}
              <FieldError errors={errors} field="notify_targets" />
            </fieldset>
          )}
          {draft.notify_on !== "success" && (
            <div className="row">
              <label>
                Notify from the failed run in a row number
                <input
                  type="number"
                  min={1}
                  value={draft.notify_after_failures}
                  onChange={(e) => set("notify_after_failures", Number(e.target.value))}
                />
                <FieldError errors={errors} field="notify_after_failures" />
              </label>
              <label>
                Remind at most every (minutes, 0 for every failed run)
                <input
                  type="number"
                  min={0}
                  value={draft.notify_reminder_minutes}
                  onChange={(e) => set("notify_reminder_minutes", Number(e.target.value))}
                />
                <FieldError errors={errors} field="notify_reminder_minutes" />
              </label>
            </div>
          )}
        </>
      )}
      <p className="explain">{notifyExplanation(draft)}</p>
    </>
  );
}

function SchedulePreview(props: { draft: Draft }) {
  const { schedule_type, cron_expression, timezone, run_at } = props.draft;
  const [runs, setRuns] = useState<string[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    if (schedule_type === "webhook") return;
    const controller = new AbortController();
    const timer = window.setTimeout(() => {
      api("post", "/api/schedules/preview", {
        body: {
          schedule_type,
          cron_expression,
          timezone,
          run_at: run_at ? new Date(run_at).toISOString() : null,
          count: 5,
        },
        signal: controller.signal,
      })
        .then((next) => {
          setRuns(next);
          setError(null);
        })
        .catch((failure: unknown) => {
          if (!controller.signal.aborted) setError(errorText(failure));
        });
    }, 300);
    return () => {
      window.clearTimeout(timer);
      controller.abort();
    };
  }, [schedule_type, cron_expression, timezone, run_at]);
  if (schedule_type === "webhook") {
    return (
      <p className="hint">
        Runs when its webhook URL is called; the URL is shown once after saving.
      </p>
    );
  }
  return (
    <div className="preview" aria-live="polite">
      <h3>Next runs (your time zone)</h3>
      {error ? (
        <p className="field-error">{error}</p>
      ) : runs === null ? (
        <p className="muted">Working out the next runs…</p>
      ) : runs.length === 0 ? (
        <p className="muted">This schedule never fires again.</p>
      ) : (
        <ol>
          {runs.map((run) => (
            <li key={run}>{localTime(run)}</li>
          ))}
        </ol>
      )}
    </div>
  );
}

function numberField(
  label: string,
  value: number,
  onChange: (value: number) => void,
  field: string,
  errors: Errors,
  step = 1,
) {
  return (
    <label>
      {label}
      <input
        type="number"
        step={step}
        value={Number.isFinite(value) ? value : ""}
        aria-invalid={errors[field] ? true : undefined}
        onChange={(e) => onChange(e.target.valueAsNumber)}
      />
      <FieldError errors={errors} field={field} />
    </label>
  );
}

export function JobWizard(props: { jobId?: string }) {
  const editing = props.jobId !== undefined;
  const duplicateOf = new URLSearchParams(window.location.search).get("from");
  const [draft, setDraft] = useState<Draft | null>(editing || duplicateOf ? null : newDraft());
  const [stored, setStored] = useState<Job | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  const [step, setStep] = useState<Step>(editing ? "basics" : "type");
  const [errors, setErrors] = useState<Errors>({});
  const [formError, setFormError] = useState<string | null>(null);
  const [saving, setSaving] = useState(false);
  const [groups, setGroups] = useState<string[]>([]);
  const [workers, setWorkers] = useState<Record<string, boolean>>({});
  const writeDenied = usePermission("jobs:write");
  const scriptDenied = usePermission("jobs:script");
  const notifyDenied = usePermission("notify:write");

  useEffect(() => {
    const source = props.jobId ?? duplicateOf;
    if (source) {
      api("get", "/api/jobs/{job_id}", { params: { job_id: source } })
        .then((job) => {
          setStored(editing ? job : null);
          const base = draftFromJob(job);
          setDraft(editing ? base : { ...base, name: `${base.name} (copy)` });
        })
        .catch((error: unknown) => setLoadError(errorText(error)));
    }
    api("get", "/api/jobs")
      .then((jobs) => setGroups([...new Set(jobs.map((j) => j.group_name).filter(Boolean))].sort()))
      .catch(() => setGroups([]));
    api("get", "/api/scripts/liveness")
      .then((live) =>
        setWorkers(Object.fromEntries(Object.entries(live).map(([k, v]) => [k, v.live]))),
      )
      .catch(() => setWorkers({}));
  }, [props.jobId, duplicateOf, editing]);

  const steps = useMemo(() => stepsFor(draft?.job_type ?? "http"), [draft?.job_type]);

  if (loadError) return <Notice kind="error" text={`The job could not be loaded: ${loadError}`} />;
  if (!draft) return <Notice kind="loading" text="Loading the job…" />;
  if (writeDenied)
    return <Notice kind="error" text={`You cannot create or edit jobs. ${writeDenied}`} />;

  const set = <K extends keyof Draft>(key: K, value: Draft[K]) => {
    setDraft({ ...draft, [key]: value });
    if (errors[key as string]) {
      setErrors(Object.fromEntries(Object.entries(errors).filter(([field]) => field !== key)));
    }
  };
  const index = steps.indexOf(step);

  async function save() {
    if (!draft) return;
    const local = localErrors(draft);
    if (Object.keys(local).length > 0) {
      setErrors(local);
      setStep(stepOfField(Object.keys(local)[0] ?? "name"));
      return;
    }
    setSaving(true);
    setFormError(null);
    try {
      const body = toPayload(draft);
      const job = editing
        ? await api("put", "/api/jobs/{job_id}", { params: { job_id: props.jobId ?? "" }, body })
        : await api("post", "/api/jobs", { body });
      // The URL with its token is in this response only: the job page shows it once.
      if (job.webhook_url) sessionStorage.setItem(`webhook:${job.id}`, job.webhook_url);
      navigate(`/jobs/${job.id}`);
    } catch (error) {
      if (error instanceof ApiError && error.field) {
        setErrors({ [error.field]: error.message });
        setStep(stepOfField(error.field));
      } else {
        setFormError(errorText(error));
      }
    } finally {
      setSaving(false);
    }
  }

  return (
    <div className="wizard">
      <h1>{editing ? `Edit ${stored?.name ?? "job"}` : "New job"}</h1>
      <nav aria-label="Wizard steps">
        <ol className="steps">
          {steps.map((s, i) => (
            <li key={s}>
              <button
                type="button"
                className={`link ${s === step ? "current" : ""}`}
                aria-current={s === step ? "step" : undefined}
                onClick={() => setStep(s)}
              >
                {i + 1}. {STEP_TITLES[s]}
              </button>
            </li>
          ))}
        </ol>
      </nav>
      <form
        className="stack"
        onSubmit={(event) => {
          event.preventDefault();
          void save();
        }}
      >
        {step === "type" && (
          <fieldset>
            <legend>What does this job run?</legend>
            {JOB_TYPES.map((type) => {
              const denied = type !== "http" ? scriptDenied : null;
              return (
                <label key={type} className="choice">
                  <input
                    type="radio"
                    name="job_type"
                    value={type}
                    checked={draft.job_type === type}
                    disabled={editing || denied !== null}
                    onChange={() =>
                      setDraft({
                        ...newDraft(type),
                        name: draft.name,
                        group_name: draft.group_name,
                      })
                    }
                  />
                  {type === "http" ? "HTTP request" : `${type} script`}
                  <Denied reason={denied} />
                </label>
              );
            })}
            {editing && <p className="hint">A job's type cannot change after it is created.</p>}
            <FieldError errors={errors} field="job_type" />
          </fieldset>
        )}

        {step === "basics" && (
          <>
            <label>
              Name
              <input
                value={draft.name}
                aria-invalid={errors.name ? true : undefined}
                onChange={(e) => set("name", e.target.value)}
              />
              <FieldError errors={errors} field="name" />
            </label>
            <label>
              Group
              <input
                value={draft.group_name}
                list="group-names"
                placeholder="e.g. billing/nightly"
                onChange={(e) => set("group_name", e.target.value)}
              />
              <datalist id="group-names">
                {groups.map((g) => (
                  <option key={g} value={g} />
                ))}
              </datalist>
              <span className="hint">
                Nest groups with /. Disabling a group pauses every job in it.
              </span>
              <FieldError errors={errors} field="group_name" />
            </label>
            <label>
              Schedule type
              <select
                value={draft.schedule_type}
                onChange={(e) => set("schedule_type", e.target.value as Draft["schedule_type"])}
              >
                <option value="cron">cron: at set times</option>
                <option value="rate">rate: every interval</option>
                <option value="one_off">one-off: once, at a date</option>
                <option value="webhook">webhook: when its URL is called</option>
              </select>
              <FieldError errors={errors} field="schedule_type" />
            </label>
            {(draft.schedule_type === "cron" || draft.schedule_type === "rate") && (
              <label>
                {draft.schedule_type === "cron" ? "Cron expression" : "Interval"}
                <input
                  value={draft.cron_expression}
                  placeholder={draft.schedule_type === "cron" ? "*/5 * * * *" : "@every 5m"}
                  aria-invalid={errors.cron_expression ? true : undefined}
                  onChange={(e) => set("cron_expression", e.target.value)}
                />
                <span className="hint">
                  {draft.schedule_type === "cron"
                    ? "Five fields (minute hour day month weekday), or @hourly, @daily, @every 10m."
                    : "@every followed by a duration: 90s, 5m, 1h30m."}
                </span>
                <FieldError errors={errors} field="cron_expression" />
              </label>
            )}
            {draft.schedule_type === "one_off" && (
              <>
                <label>
                  Run at (your time zone)
                  <input
                    type="datetime-local"
                    value={draft.run_at}
                    onChange={(e) => set("run_at", e.target.value)}
                  />
                  <FieldError errors={errors} field="run_at" />
                </label>
                <label>
                  After it runs
                  <select
                    value={draft.one_off_after_run}
                    onChange={(e) => set("one_off_after_run", e.target.value)}
                  >
                    <option value="keep">keep the job, disabled</option>
                    <option value="delete">delete the job</option>
                  </select>
                </label>
              </>
            )}
            {draft.schedule_type !== "webhook" && (
              <label>
                Time zone
                <input
                  value={draft.timezone}
                  placeholder="empty: the server's zone"
                  onChange={(e) => set("timezone", e.target.value)}
                />
                <FieldError errors={errors} field="timezone" />
              </label>
            )}
            <label className="choice">
              <input
                type="checkbox"
                checked={draft.enabled}
                onChange={(e) => set("enabled", e.target.checked)}
              />
              Enabled
            </label>
            <SchedulePreview draft={draft} />
          </>
        )}

        {step === "request" && (
          <>
            <div className="row">
              <label>
                Method
                <select
                  value={draft.http_method}
                  onChange={(e) => set("http_method", e.target.value)}
                >
                  {METHODS.map((m) => (
                    <option key={m}>{m}</option>
                  ))}
                </select>
              </label>
              <label className="grow">
                URL
                <input
                  type="text"
                  inputMode="url"
                  value={draft.url}
                  placeholder="https://example.com/task"
                  aria-invalid={errors.url ? true : undefined}
                  onChange={(e) => set("url", e.target.value)}
                />
                <FieldError errors={errors} field="url" />
              </label>
            </div>
            <Pairs label="Query parameters" pairs={draft.query} onChange={(v) => set("query", v)} />
            <FieldError errors={errors} field="query_params" />
            <Pairs label="Headers" pairs={draft.headers} onChange={(v) => set("headers", v)} />
            <FieldError errors={errors} field="headers" />
            <label>
              JSON body
              <textarea
                rows={5}
                value={draft.body_text}
                spellCheck={false}
                aria-invalid={errors.body ? true : undefined}
                onChange={(e) => set("body_text", e.target.value)}
              />
              <span className="hint">Sent exactly as written. Leave empty for no body.</span>
              <FieldError errors={errors} field="body" />
            </label>
            <label>
              Authentication
              <select
                value={draft.auth_type}
                onChange={(e) =>
                  setDraft({
                    ...draft,
                    auth_type: e.target.value as Draft["auth_type"],
                    auth_config: {},
                  })
                }
              >
                <option value="none">none</option>
                <option value="bearer">bearer token</option>
                <option value="basic">basic (user and password)</option>
                <option value="api_key">API key header</option>
              </select>
            </label>
            {draft.auth_type !== "none" && (
              <fieldset>
                <legend>Credentials (write-only)</legend>
                {(draft.auth_type === "bearer"
                  ? ["token"]
                  : draft.auth_type === "basic"
                    ? ["username", "password"]
                    : ["header_name", "api_key"]
                ).map((key) => (
                  <label key={key}>
                    {key}
                    <input
                      type={key === "username" || key === "header_name" ? "text" : "password"}
                      autoComplete="off"
                      value={draft.auth_config[key] ?? ""}
                      placeholder={
                        stored?.has_auth_secret && key !== "username" && key !== "header_name"
                          ? "stored: leave empty to keep"
                          : ""
                      }
                      onChange={(e) =>
                        set("auth_config", { ...draft.auth_config, [key]: e.target.value })
                      }
                    />
                  </label>
                ))}
                <FieldError errors={errors} field="auth_config" />
              </fieldset>
            )}
          </>
        )}

        {step === "script" && (
          <>
            {workers[draft.job_type] === false && (
              <p className="warning" role="status">
                No {draft.job_type} worker is live right now: the job is saved, but its runs wait
                until one starts.
              </p>
            )}
            <div>
              <span className="label-text" id="script-label">
                Script ({draft.job_type})
              </span>
              <CodeEditor
                value={draft.script_body}
                language={draft.job_type}
                label={`Script (${draft.job_type})`}
                onChange={(v) => set("script_body", v)}
              />
              <FieldError errors={errors} field="script_body" />
            </div>
            <label>
              Arguments (one a line)
              <textarea
                rows={3}
                value={draft.script_args.join("\n")}
                onChange={(e) => set("script_args", e.target.value.split("\n"))}
              />
              <FieldError errors={errors} field="script_args" />
            </label>
            <label>
              Secret variables the script may read (one a line)
              <textarea
                rows={2}
                value={draft.script_secret_vars.join("\n")}
                onChange={(e) => set("script_secret_vars", e.target.value.split("\n"))}
              />
              <FieldError errors={errors} field="script_secret_vars" />
            </label>
            <fieldset>
              <legend>Volumes</legend>
              <p className="hint">
                Volumes are enforced only when the worker runs scripts in its sandbox; without it a
                script can reach any path the worker can.
              </p>
              {draft.volumes.map((volume, i) => (
                <div className="row" key={i}>
                  <input
                    aria-label={`Volume ${i + 1} name`}
                    value={volume.name}
                    onChange={(e) =>
                      set(
                        "volumes",
                        draft.volumes.map((v, j) => (j === i ? { ...v, name: e.target.value } : v)),
                      )
                    }
                  />
                  <select
                    aria-label={`Volume ${i + 1} mode`}
                    value={volume.mode}
                    onChange={(e) =>
                      set(
                        "volumes",
                        draft.volumes.map((v, j) =>
                          j === i ? { ...v, mode: e.target.value as "ro" | "rw" } : v,
                        ),
                      )
                    }
                  >
                    <option value="ro">read-only</option>
                    <option value="rw">read-write</option>
                  </select>
                  <button
                    type="button"
                    className="link"
                    onClick={() =>
                      set(
                        "volumes",
                        draft.volumes.filter((_, j) => j !== i),
                      )
                    }
                  >
                    Remove
                  </button>
                </div>
              ))}
              <button
                type="button"
                className="secondary"
                onClick={() => set("volumes", [...draft.volumes, { name: "", mode: "ro" }])}
              >
                Add volume
              </button>
              <FieldError errors={errors} field="capabilities" />
            </fieldset>
          </>
        )}

        {step === "behaviour" && (
          <>
            <fieldset>
              <legend>Timeout</legend>
              {numberField(
                "Timeout (ms)",
                draft.exec_timeout_ms,
                (v) => set("exec_timeout_ms", v),
                "exec_timeout_ms",
                errors,
              )}
              <p className="explain">{timeoutExplanation(draft)}</p>
            </fieldset>
            <fieldset>
              <legend>Loop</legend>
              <label className="choice">
                <input
                  type="checkbox"
                  checked={draft.loop_enabled}
                  onChange={(e) => set("loop_enabled", e.target.checked)}
                />
                Call again while the response says there is more work
              </label>
              {draft.loop_enabled && (
                <div className="grid">
                  <label>
                    Response path
                    <input
                      value={draft.loop_response_path}
                      onChange={(e) => set("loop_response_path", e.target.value)}
                    />
                    <FieldError errors={errors} field="loop_response_path" />
                  </label>
                  {numberField(
                    "Delay between calls (ms)",
                    draft.loop_delay_ms,
                    (v) => set("loop_delay_ms", v),
                    "loop_delay_ms",
                    errors,
                  )}
                  {numberField(
                    "Jitter (ms)",
                    draft.loop_jitter_ms,
                    (v) => set("loop_jitter_ms", v),
                    "loop_jitter_ms",
                    errors,
                  )}
                  {numberField(
                    "Most calls in a run",
                    draft.loop_max_iterations,
                    (v) => set("loop_max_iterations", v),
                    "loop_max_iterations",
                    errors,
                  )}
                </div>
              )}
              <p className="explain">{loopExplanation(draft)}</p>
            </fieldset>
            <fieldset>
              <legend>Retry</legend>
              <label className="choice">
                <input
                  type="checkbox"
                  checked={draft.retry_enabled}
                  onChange={(e) => set("retry_enabled", e.target.checked)}
                />
                Retry a failed attempt
              </label>
              {draft.retry_enabled && (
                <div className="grid">
                  <label>
                    Mode
                    <select
                      value={draft.retry_mode}
                      onChange={(e) => set("retry_mode", e.target.value as Draft["retry_mode"])}
                    >
                      <option value="exponential">exponential</option>
                      <option value="fixed">fixed</option>
                      <option value="exponential_jitter">exponential with jitter</option>
                    </select>
                  </label>
                  {numberField(
                    "Attempts in all",
                    draft.retry_max_attempts,
                    (v) => set("retry_max_attempts", v),
                    "retry_max_attempts",
                    errors,
                  )}
                  {numberField(
                    "First wait (ms)",
                    draft.retry_base_delay_ms,
                    (v) => set("retry_base_delay_ms", v),
                    "retry_base_delay_ms",
                    errors,
                  )}
                  {draft.retry_mode !== "fixed" &&
                    numberField(
                      "Multiplier",
                      draft.retry_multiplier,
                      (v) => set("retry_multiplier", v),
                      "retry_multiplier",
                      errors,
                      0.1,
                    )}
                  {numberField(
                    "Longest wait (ms)",
                    draft.retry_max_delay_ms,
                    (v) => set("retry_max_delay_ms", v),
                    "retry_max_delay_ms",
                    errors,
                  )}
                </div>
              )}
              <p className="explain">{retryExplanation(draft)}</p>
              <label>
                On final failure, call URL
                <input
                  value={draft.on_failure_url}
                  placeholder="optional"
                  onChange={(e) => set("on_failure_url", e.target.value)}
                />
                <FieldError errors={errors} field="on_failure_url" />
              </label>
            </fieldset>
            <fieldset>
              <legend>Pool and overlap</legend>
              {numberField(
                "Parallel attempts per fire",
                draft.pool_count,
                (v) => set("pool_count", v),
                "pool_count",
                errors,
              )}
              <label>
                When the previous fire still runs
                <select
                  value={draft.overlap_policy}
                  onChange={(e) => set("overlap_policy", e.target.value as Draft["overlap_policy"])}
                >
                  <option value="skip">skip the busy member</option>
                  <option value="allow">start anyway</option>
                </select>
              </label>
              <p className="explain">{poolExplanation(draft)}</p>
            </fieldset>
          </>
        )}

        {step === "notify" && (
          <NotifyStep draft={draft} errors={errors} set={set} denied={notifyDenied} />
        )}

        {step === "review" && (
          <>
            <h2>The JSON that will be sent</h2>
            <pre className="json" tabIndex={0} aria-label="Job JSON">
              {JSON.stringify(toPayload(draft), null, 2)}
            </pre>
          </>
        )}

        {Object.keys(errors).length > 0 && (
          <p className="error" role="alert">
            Fix: {Object.values(errors).join("; ")}
          </p>
        )}
        {formError && (
          <p className="error" role="alert">
            {formError}
          </p>
        )}
        <div className="row actions">
          {index > 0 && (
            <button
              type="button"
              className="secondary"
              onClick={() => setStep(steps[index - 1] ?? "type")}
            >
              Back
            </button>
          )}
          {index < steps.length - 1 && (
            <button type="button" onClick={() => setStep(steps[index + 1] ?? "review")}>
              Next
            </button>
          )}
          {(editing || step === "review") && (
            <button type="submit" disabled={saving}>
              {editing ? "Save changes" : "Create job"}
            </button>
          )}
          <Link to={editing ? `/jobs/${props.jobId}` : "/"} className="button secondary">
            Cancel
          </Link>
        </div>
      </form>
    </div>
  );
}
