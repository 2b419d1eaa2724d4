import { useCallback, useEffect, useState } from "react";
import { errorText, Notice } from "./States";

export interface Loaded<T> {
  data: T | null;
  error: string | null;
  reload: () => Promise<void>;
}

/** Load one resource, keep its error, and let the page reload it after a change. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[] = []): Loaded<T> {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  // The caller lists what `load` depends on, as with useEffect.
  // eslint-disable-next-line react-hooks/exhaustive-deps
  const run = useCallback(load, deps);
  const reload = useCallback(async () => {
    try {
      setData(await run());
      setError(null);
    } catch (failure) {
      setError(errorText(failure));
    }
  }, [run]);
  useEffect(() => {
    void reload();
  }, [reload]);
  return { data, error, reload };
}

/** The loading, error and empty states of a list, then the list itself. */
export function ListState<T>(props: {
  state: Loaded<T[]>;
  what: string;
  empty: string;
  children: (items: T[]) => React.ReactNode;
}) {
  const { data, error } = props.state;
  if (error) return <Notice kind="error" text={`${props.what} could not be read: ${error}`} />;
  if (!data) return <Notice kind="loading" text={`Loading ${props.what.toLowerCase()}…`} />;
  if (data.length === 0) return <Notice kind="empty" text={props.empty} />;
  return <>{props.children(data)}</>;
}

/** A value shown once (a password, a token): copy it now, it cannot be read again. */
export function ShownOnce(props: { label: string; value: string; onDone?: () => void }) {
  const [copied, setCopied] = useState(false);
  return (
    <div className="shown-once" role="status" aria-label={props.label}>
      <p>
        <strong>{props.label}</strong> (shown only now; copy it before you leave):
      </p>
      <div className="row">
        <code className="mono secret-value">{props.value}</code>
        <button
          type="button"
          onClick={() =>
            void navigator.clipboard?.writeText(props.value).then(() => setCopied(true))
          }
        >
          {copied ? "Copied" : "Copy"}
        </button>
        {props.onDone && (
          <button type="button" className="secondary" onClick={props.onDone}>
            Done
          </button>
        )}
      </div>
    </div>
  );
}

/** A one-line outcome of the last action: a status, or an alert when it was refused. */
export function Outcome(props: { text: string | null }) {
  if (!props.text) return null;
  const refused = props.text.startsWith("Refused");
  return (
    <p className={refused ? "error" : "notice"} role={refused ? "alert" : "status"}>
      {props.text}
    </p>
  );
}

/** Run an action, report its outcome in one sentence, then reload what it changed. */
export function useAction(reload?: () => Promise<void>) {
  const [outcome, setOutcome] = useState<string | null>(null);
  const run = useCallback(
    async (what: () => Promise<unknown>, done: string): Promise<boolean> => {
      try {
        await what();
        setOutcome(done);
        if (reload) await reload();
        return true;
      } catch (failure) {
        setOutcome(`Refused: ${errorText(failure)}`);
        return false;
      }
    },
    [reload],
  );
  return { outcome, setOutcome, run };
}
