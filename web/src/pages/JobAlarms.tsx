import { useState } from "react";
import { api, type Schemas } from "../api/client";
import { usePendingConfirm } from "../components/Table";
import { Help } from "../components/Help";
import { ListState, Outcome, useAction, useLoad } from "../components/Load";
import { localTime } from "../format";
import { usePermission } from "../session";

type Alarm = Schemas["AlarmView"];
type AlarmWrite = Schemas["AlarmWrite"];

function describe(a: AlarmWrite): string {
  const what = a.metric === "failed" ? "failed attempts" : "attempts";
  return `${a.threshold} or more ${what} in ${a.window_minutes} minutes`;
}

/** A job's invocation alarms: attempt counts over a window that notify the job's targets. */
export function JobAlarms(props: { jobId: string }) {
  const denied = usePermission("notify:write");
  const params = { job_id: props.jobId };
  const alarms = useLoad(() => api("get", "/api/jobs/{job_id}/alarms", { params }), [props.jobId]);
  const { outcome, run } = useAction(alarms.reload);
  const [draft, setDraft] = useState<AlarmWrite>({
    metric: "failed",
    threshold: 5,
    window_minutes: 30,
    enabled: true,
  });
  const confirm = usePendingConfirm<Alarm>(
    (a) =>
      `Delete the alarm "${describe(a as AlarmWrite)}": it stops being checked and notifies nobody. Add it again to undo.`,
    "Delete alarm",
    (a) => {
      void run(
        () =>
          api("delete", "/api/jobs/{job_id}/alarms/{alarm_id}", {
            params: { job_id: props.jobId, alarm_id: String(a.id) },
          }),
        "Alarm deleted.",
      );
    },
  );

  return (
    <div className="alarms" aria-label="Invocation alarms" role="group">
      <h3>
        Invocation alarms
        <Help topic="invocation alarms">
          An alarm counts this job&apos;s attempts (or failed ones) over a window and notifies the
          job&apos;s targets when the count reaches the threshold, and again when it falls back.
          Checked every 60 seconds. jobs:read sees them; notify:write changes them. Disable or
          delete an alarm to silence it.
        </Help>
      </h3>
      <Outcome text={outcome} />
      <ListState state={alarms} what="Alarms" empty="No invocation alarm on this job.">
        {(list) => (
          <ul className="plain-list">
            {list.map((a) => (
              <li key={a.id}>
                {describe(a as AlarmWrite)}: <strong>{a.last_state}</strong>
                {a.last_changed_at ? ` since ${localTime(a.last_changed_at)}` : ""}
                {a.enabled ? "" : " (disabled)"}
                {!denied && (
                  <>
                    {" "}
                    <button
                      type="button"
                      className="small secondary"
                      onClick={() =>
                        void run(
                          () =>
                            api("put", "/api/jobs/{job_id}/alarms/{alarm_id}", {
                              params: { job_id: props.jobId, alarm_id: String(a.id) },
                              body: {
                                metric: a.metric as AlarmWrite["metric"],
                                threshold: a.threshold,
                                window_minutes: a.window_minutes,
                                enabled: !a.enabled,
                              },
                            }),
                          a.enabled ? "Alarm disabled." : "Alarm enabled.",
                        )
                      }
                    >
                      {a.enabled ? "Disable alarm" : "Enable alarm"}
                    </button>{" "}
                    <button type="button" className="small danger" onClick={() => confirm.ask(a)}>
                      Delete alarm
                    </button>
                  </>
                )}
              </li>
            ))}
          </ul>
        )}
      </ListState>
      {!denied && (
        <form
          className="row"
          aria-label="New invocation alarm"
          onSubmit={(e) => {
            e.preventDefault();
            void run(
              () => api("post", "/api/jobs/{job_id}/alarms", { params, body: draft }),
              `Alarm added: ${describe(draft)}.`,
            );
          }}
        >
          <label>
            Count
            <select
              value={draft.metric}
              onChange={(e) =>
                setDraft({ ...draft, metric: e.target.value as AlarmWrite["metric"] })
              }
            >
              <option value="failed">failed attempts</option>
              <option value="total">all attempts</option>
            </select>
          </label>
          <label>
            At or above
            <input
              type="number"
              min={1}
              value={draft.threshold}
              onChange={(e) => setDraft({ ...draft, threshold: Number(e.target.value) })}
            />
          </label>
          <label>
            Window (minutes)
            <input
              type="number"
              min={1}
              max={1440}
              value={draft.window_minutes}
              onChange={(e) => setDraft({ ...draft, window_minutes: Number(e.target.value) })}
            />
          </label>
          <button type="submit">Add alarm</button>
        </form>
      )}
      {confirm.dialog}
    </div>
  );
}
