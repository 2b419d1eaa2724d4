import { describe, expect, it } from "vitest";
import {
  draftFromJob,
  formatDuration,
  localErrors,
  loopExplanation,
  newDraft,
  notifyExplanation,
  poolExplanation,
  retryDelays,
  retryExplanation,
  stepOfField,
  stepsFor,
  toPayload,
} from "./logic";
import { errorField } from "../api/client";

describe("retry explanation", () => {
  it("lists exponential waits and the attempt budget", () => {
    const draft = { ...newDraft(), retry_max_delay_ms: 60_000 };
    expect(retryExplanation(draft)).toBe(
      "Retries after 1 s, 2 s, 4 s, 8 s; gives up after 5 attempts.",
    );
  });
  it("caps waits at the max delay", () => {
    const draft = { ...newDraft(), retry_max_attempts: 6, retry_max_delay_ms: 5000 };
    expect(retryDelays(draft)).toEqual([1000, 2000, 4000, 5000, 5000]);
  });
  it("keeps a fixed wait", () => {
    const draft = { ...newDraft(), retry_mode: "fixed" as const, retry_base_delay_ms: 1500 };
    expect(retryExplanation(draft)).toBe(
      "Retries after 1.5 s, 1.5 s, 1.5 s, 1.5 s; gives up after 5 attempts.",
    );
  });
  it("says up to for jitter", () => {
    const draft = {
      ...newDraft(),
      retry_mode: "exponential_jitter" as const,
      retry_max_attempts: 3,
    };
    expect(retryExplanation(draft)).toBe(
      "Retries after up to 1 s, 2 s; gives up after 3 attempts.",
    );
  });
  it("treats unusable settings as the worker does", () => {
    const draft = {
      ...newDraft(),
      retry_base_delay_ms: 0,
      retry_multiplier: 1,
      retry_max_attempts: 0,
    };
    expect(retryDelays(draft)).toEqual([1000, 2000, 4000, 8000]);
  });
  it("says so when retries are off", () => {
    expect(retryExplanation({ ...newDraft(), retry_enabled: false })).toMatch(/not retried/);
  });
});

describe("loop and pool explanations", () => {
  it("describes a loop with jitter and a cap", () => {
    const draft = {
      ...newDraft(),
      loop_enabled: true,
      loop_delay_ms: 2000,
      loop_jitter_ms: 500,
      loop_max_iterations: 10,
    };
    expect(loopExplanation(draft)).toBe(
      "After each success, reads result.remaining from the response; while it is a number above 0 the job calls again after 2 s plus up to 500 ms, at most 10 calls in a run.",
    );
  });
  it("describes a pool that skips busy members", () => {
    expect(poolExplanation({ ...newDraft(), pool_count: 3 })).toBe(
      "Each fire starts 3 attempts side by side (pool indexes 0 to 2); a member still running when the next fire comes is skipped for that fire.",
    );
  });
  it("forces one member for a one-off", () => {
    expect(poolExplanation({ ...newDraft(), pool_count: 4, schedule_type: "one_off" })).toMatch(
      /^Each fire starts one attempt/,
    );
  });
});

describe("payload", () => {
  it("sends HTTP fields only for an HTTP job, with the body parsed", () => {
    const draft = {
      ...newDraft(),
      name: " ping ",
      url: "http://127.0.0.1/x",
      body_text: '{"a": 1}',
      headers: [
        { key: "X-A", value: "1" },
        { key: " ", value: "dropped" },
      ],
    };
    const payload = toPayload(draft);
    expect(payload.name).toBe("ping");
    expect(payload.body).toEqual({ a: 1 });
    expect(payload.headers).toEqual({ "X-A": "1" });
    expect(payload).not.toHaveProperty("script_body");
    expect(payload.cron_expression).toBe("*/5 * * * *");
  });
  it("sends script fields only for a script job", () => {
    const payload = toPayload({
      ...newDraft("python"),
      name: "s",
      script_body: "print(1)",
      script_args: ["a", ""],
    });
    expect(payload.script_args).toEqual(["a"]);
    expect(payload).not.toHaveProperty("url");
    expect(payload).not.toHaveProperty("http_method");
  });
  it("leaves empty secrets out so an edit keeps them", () => {
    const payload = toPayload({ ...newDraft(), auth_type: "bearer", auth_config: { token: "" } });
    expect(payload.auth_config).toEqual({});
  });
  it("sends a one-off's instant in UTC and one pool member", () => {
    const payload = toPayload({
      ...newDraft(),
      schedule_type: "one_off",
      run_at: "2030-01-02T03:04",
      pool_count: 3,
    });
    expect(payload.run_at).toBe(new Date("2030-01-02T03:04").toISOString());
    expect(payload.pool_count).toBe(1);
    expect(payload).not.toHaveProperty("cron_expression");
  });
});

describe("field checks and error placement", () => {
  it("flags what the browser can see is wrong", () => {
    expect(localErrors({ ...newDraft(), body_text: "{nope" })).toMatchObject({
      name: "name is required",
      url: "url is required",
    });
    expect(localErrors({ ...newDraft(), body_text: "{nope" }).body).toMatch(
      /^body: not valid JSON/,
    );
  });
  it("maps API messages to their field and step", () => {
    expect(errorField("pool_count: must be at least 1")).toBe("pool_count");
    expect(errorField("name is required")).toBe("name");
    expect(errorField('unknown field "x"')).toBeNull();
    expect(stepOfField("retry_max_attempts")).toBe("behaviour");
    expect(stepOfField("url")).toBe("request");
    expect(stepOfField("script_body")).toBe("script");
  });
  it("picks the request or script step by type", () => {
    expect(stepsFor("http")).toContain("request");
    expect(stepsFor("bash")).toContain("script");
  });
  it("formats durations", () => {
    expect(formatDuration(90_000)).toBe("1 min 30 s");
    expect(formatDuration(250)).toBe("250 ms");
    expect(formatDuration(3_600_000)).toBe("1 h");
  });
});

describe("notify settings", () => {
  it("survive an edit: a stored job's notify fields go back unchanged", () => {
    const job = {
      ...toPayload({ ...newDraft(), name: "n", url: "http://x/" }),
      id: "j",
      notify_on: "failure",
      notify_all_targets: false,
      notify_targets: [3, 7],
      notify_after_failures: 3,
      notify_reminder_minutes: 60,
    } as unknown as Parameters<typeof draftFromJob>[0];
    const payload = toPayload(draftFromJob(job));
    expect(payload.notify_targets).toEqual([3, 7]);
    expect(payload.notify_after_failures).toBe(3);
    expect(payload.notify_reminder_minutes).toBe(60);
    expect(payload.notify_all_targets).toBe(false);
  });
  it("explains a streak threshold with reminders and recovery", () => {
    const draft = {
      ...newDraft(),
      notify_on: "failure" as const,
      notify_targets: [1],
      notify_after_failures: 3,
      notify_reminder_minutes: 60,
    };
    expect(notifyExplanation(draft)).toBe(
      "Notifies 1 chosen target of the 3rd failed run in a row, then at most every 1 h while it keeps failing, and when it recovers.",
    );
  });
  it("explains every run to every target", () => {
    const draft = { ...newDraft(), notify_on: "both" as const, notify_all_targets: true };
    expect(notifyExplanation(draft)).toBe(
      "Notifies every target of each successful run; and of each failed run, and when it recovers.",
    );
  });
  it("says when nothing is sent", () => {
    expect(notifyExplanation(newDraft())).toBe("No notices for this job's runs.");
  });
});
