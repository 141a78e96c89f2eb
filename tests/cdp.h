/* A headless Chromium driven over its DevTools protocol on a pipe
 * (--remote-debugging-pipe: commands on its fd 3, answers on its fd 4,
 * each a JSON text ended by a NUL), so a test can open a page, wait for
 * its scripts, read the DOM back and take a screenshot without any
 * WebSocket library. */
#ifndef TESTS_CDP_H
#define TESTS_CDP_H

#include <jansson.h>

typedef struct cdp cdp;

/* The browser: $CHROMIUM, else chromium or chromium-browser on PATH;
 * NULL when there is none. */
const char *cdp_browser(void);
/* Starts it with a fresh profile in profile_dir, its standard error
 * appended to log, and opens url in a page whose viewport is width x
 * height CSS pixels, one device pixel each.  NULL with the reason in err
 * (256 bytes). */
cdp *cdp_open(const char *browser, const char *profile_dir, const char *log,
    const char *url, int width, int height, char *err);
/* The value of a JavaScript expression that yields a string, evaluated
 * in the page (a new string, the caller frees it), or NULL. */
char *cdp_eval(cdp *c, const char *expr);
/* A PNG of the viewport into path, cut at the page's end when the page
 * is shorter; 0 or -1. */
int cdp_screenshot(cdp *c, const char *path);
/* Closes the browser and waits for it. */
void cdp_close(cdp *c);

#endif
