import type { CallBucket } from "../api/client";

/** One job's recent buckets: grey never ran, green all succeeded, red some failed. */
export function HeartbeatBar(props: { buckets: CallBucket[] | undefined; failed: boolean }) {
  if (props.failed) {
    return (
      <span className="heartbeat heartbeat-unavailable" title="Heartbeats could not be fetched">
        unavailable
      </span>
    );
  }
  if (!props.buckets) return <span className="heartbeat heartbeat-loading" aria-hidden="true" />;
  const ran = props.buckets.reduce((sum, b) => sum + b.total, 0);
  const failures = props.buckets.reduce((sum, b) => sum + b.failed, 0);
  const label =
    ran === 0 ? "Never ran in this window" : `${ran} calls, ${failures} failed in this window`;
  return (
    <span className="heartbeat" role="img" aria-label={label} title={label}>
      {props.buckets.map((bucket) => (
        <span
          key={bucket.bucket_start}
          className={
            bucket.total === 0 ? "beat-none" : bucket.failed > 0 ? "beat-failed" : "beat-ok"
          }
        />
      ))}
    </span>
  );
}
