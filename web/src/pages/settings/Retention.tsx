import { useEffect, useState } from "react";
import { api } from "../../api/client";
import { Help } from "../../components/Help";
import { Outcome, useAction, useLoad } from "../../components/Load";
import { SectionHead } from "../../components/SectionHead";
import { Denied, Notice } from "../../components/States";
import { allows, useSession } from "../../session";

/** One "keep for N days" setting: read, edit, save. */
function DaysSetting(props: {
  label: string;
  days: number | null;
  error: string | null;
  canWrite: boolean;
  writeNeeds: string;
  max: number;
  onSave: (days: number) => Promise<boolean>;
  help: string;
}) {
  const [value, setValue] = useState("");
  useEffect(() => {
    if (props.days !== null) setValue(String(props.days));
  }, [props.days]);
  if (props.error) return <Notice kind="error" text={`${props.label}: ${props.error}`} />;
  if (props.days === null) return <Notice kind="loading" text={`Loading ${props.label}…`} />;
  return (
    <form
      className="row"
      aria-label={props.label}
      onSubmit={(e) => {
        e.preventDefault();
        void props.onSave(Number(value));
      }}
    >
      <label>
        {props.label} (days)
        <input
          type="number"
          min={1}
          max={props.max}
          value={value}
          disabled={!props.canWrite}
          onChange={(e) => setValue(e.target.value)}
          required
        />
      </label>
      {props.canWrite ? (
        <button type="submit">Save</button>
      ) : (
        <Denied reason={`Needs the ${props.writeNeeds} permission to change it.`} />
      )}
      <Help topic={props.label}>{props.help}</Help>
    </form>
  );
}

export function RetentionSection() {
  const { me } = useSession();
  const queueAllowed = allows(me, "settings:queue_jobs");
  const auditAllowed = allows(me, "audit:read");
  const queue = useLoad(
    () => (queueAllowed ? api("get", "/api/settings/queue-jobs") : Promise.resolve(null)),
    [queueAllowed],
  );
  const audit = useLoad(
    () => (auditAllowed ? api("get", "/api/settings/audit") : Promise.resolve(null)),
    [auditAllowed],
  );
  const { outcome, run } = useAction();
  return (
    <>
      <SectionHead title="Retention">
        How long ended queue jobs and audit entries are kept before a daily sweep deletes them.
        Queue job retention needs settings:queue_jobs; audit retention is shown with audit:read and
        changed with audit:write. A shorter period deletes old rows at the next sweep, and deleted
        rows cannot be brought back.
      </SectionHead>
      <Outcome text={outcome} />
      {queueAllowed && (
        <DaysSetting
          label="Keep ended queue jobs"
          days={queue.data?.queue_job_retention_days ?? null}
          error={queue.error}
          canWrite
          writeNeeds="settings:queue_jobs"
          max={3650}
          help="The engine's finished, failed and cancelled queue jobs older than this are deleted; the job's call history is kept separately."
          onSave={(days) =>
            run(
              () =>
                api("put", "/api/settings/queue-jobs", {
                  body: { queue_job_retention_days: days },
                }),
              `Ended queue jobs are kept ${days} days.`,
            ).then(async (ok) => (await queue.reload(), ok))
          }
        />
      )}
      {auditAllowed && (
        <DaysSetting
          label="Keep audit entries"
          days={audit.data?.audit_retention_days ?? null}
          error={audit.error}
          canWrite={allows(me, "audit:write")}
          writeNeeds="audit:write"
          max={3650}
          help="Audit entries older than this are deleted. Shortening it destroys history you may need for an investigation."
          onSave={(days) =>
            run(
              () => api("put", "/api/settings/audit", { body: { audit_retention_days: days } }),
              `Audit entries are kept ${days} days.`,
            ).then(async (ok) => (await audit.reload(), ok))
          }
        />
      )}
    </>
  );
}
