/// <reference types="vitest/config" />
import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// The build lands inside the Python package, which the ui service serves at `/`.
export default defineConfig({
  plugins: [react()],
  base: "/",
  build: {
    outDir: "../src/zilean/ui/spa",
    emptyOutDir: true,
    assetsDir: "app-assets",
    chunkSizeWarningLimit: 1500,
  },
  test: {
    environment: "jsdom",
    include: ["src/**/*.test.ts", "src/**/*.test.tsx"],
  },
});
