const browserZone = Intl.DateTimeFormat().resolvedOptions().timeZone;

/** An instant in the browser's zone, e.g. `14 Mar, 09:30:00`. */
export function localTime(iso: string | null | undefined): string {
  if (!iso) return "—";
  return new Date(iso).toLocaleString(undefined, {
    day: "numeric",
    month: "short",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
  });
}

/** The same instant in another zone (the scheduler's), for a hover title. */
export function zoneTime(iso: string | null | undefined, zone: string): string {
  if (!iso) return "";
  try {
    return `${new Date(iso).toLocaleString(undefined, { timeZone: zone, dateStyle: "medium", timeStyle: "long" })} (${zone})`;
  } catch {
    return iso;
  }
}

export { browserZone };
