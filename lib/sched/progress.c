/* Progress: one pass over the transports, completions, failing ops and
 * issue; the progress thread, which sleeps on the transports' event fds
 * when idle and parks while a caller waits; and waiting callers (see
 * engine_impl.h). */
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "sched/engine_impl.h"

static void wake_progress(swy_sched_t *s)
{
    uint64_t one = 1;
    if (s->wake_fd >= 0 && write(s->wake_fd, &one, sizeof(one)) < 0)
        (void)0; /* the counter is full: the thread is awake anyway */
}

/* Park the progress thread for at most ns, or until thread_unpark() or
 * the hand-off timer. Called and returns under s->lock; a wake-up
 * between the unlock and the poll stays in park_fd, so none is lost. */
static void thread_park(swy_sched_t *s, uint64_t ns)
{
    s->thread_parked = 1;
    pthread_mutex_unlock(&s->lock);
    struct pollfd pfds[2] = {{.fd = s->park_fd, .events = POLLIN},
                             {.fd = s->timer_fd, .events = POLLIN}};
    struct timespec timeout = {.tv_sec = (time_t)(ns / 1000000000u),
                               .tv_nsec = (long)(ns % 1000000000u)};
    uint64_t count;
    int fired = 0;
    if (ppoll(pfds, 2, &timeout, NULL) > 0) {
        if ((pfds[0].revents & POLLIN) &&
            read(s->park_fd, &count, sizeof(count)) < 0)
            (void)0; /* drained by nobody else: cannot fail */
        fired = (pfds[1].revents & POLLIN) &&
                read(s->timer_fd, &count, sizeof(count)) == sizeof(count);
    }
    pthread_mutex_lock(&s->lock);
    s->thread_parked = 0;
    if (fired)
        s->timer_armed = 0;
}

/* Under s->lock: wake the thread now if it is parked. */
static void thread_unpark(swy_sched_t *s)
{
    uint64_t one = 1;
    if (s->thread_parked && write(s->park_fd, &one, sizeof(one)) < 0)
        (void)0; /* the counter is full: a wake-up is pending anyway */
}

/* Under s->lock: have the thread look when the hand-off grace after the
 * last wait ends, without waking it now (see PARK_NS). A timer already
 * armed fires no later (the grace only moves on), and the thread parks
 * again for what is left of the grace. */
static void arm_handoff(swy_sched_t *s)
{
    if (s->timer_armed)
        return;
    uint64_t at = s->last_wait_end_ns + HANDOFF_GRACE_NS;
    struct itimerspec its = {
        .it_value = {.tv_sec = (time_t)(at / 1000000000u),
                     .tv_nsec = (long)(at % 1000000000u)}};
    if (timerfd_settime(s->timer_fd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
        s->timer_armed = 1;
    else
        thread_unpark(s); /* no timer: look now rather than too late */
}

int swy_sched_progress_locked(swy_sched_t *s)
{
    int events = swy_transport_set_progress(s->p.transports);
    s->now_ns = swy_time_ns();
    int handled = 0;
    while (!swy_list_empty(&s->completed)) {
        swy_uop_t *uop = swy_container_of(s->completed.next, swy_uop_t,
                                          q_link);
        swy_list_del(&uop->q_link);
        swy_sched_handle_completion(s, uop);
        handled++;
    }
    swy_sched_check_control_plane(s, (double)s->now_ns * 1e-9);
    /* Completions may have reduced or copied for a while: the sends
     * issued next are stamped with the time they leave. */
    if (handled > 0)
        s->now_ns = swy_time_ns();
    events += handled;
    if (s->n_stream_ops > 0)
        events += swy_sched_stream_ops_poll(s, 1);
    if (s->n_launched > 0)
        events += swy_sched_lane_poll(s);
    if (s->n_failing > 0 || (s->n_failed_views > 0 && !s->quiesce_reported))
        swy_sched_progress_failing(s);
    events += swy_sched_issue_all(s);
    double now = (double)s->now_ns * 1e-9;
    if (now >= s->next_deadline_check) {
        s->next_deadline_check = now + 0.05;
        if (!swy_list_empty(&s->ops))
            swy_sched_check_deadlines(s, now);
    }
    return events;
}

void swy_sched_handoff(swy_sched_t *s)
{
    pthread_mutex_lock(&s->lock);
    if (s->threaded && s->waiters == 0) {
        if (swy_time_ns() < s->last_wait_end_ns + HANDOFF_GRACE_NS)
            arm_handoff(s);
        else if (s->thread_parked)
            thread_unpark(s);
        else
            wake_progress(s); /* asleep on the fds, maybe for 500 ms */
    }
    pthread_mutex_unlock(&s->lock);
}

/* Sleep until a transport or the control plane has something, or at most
 * max_ms. Returns at once if some transport cannot sleep right now. */
static void sleep_on_events(swy_sched_t *s, int max_ms)
{
    int fds[SWY_TRANSPORT_MAX + 3];
    pthread_mutex_lock(&s->lock);
    int n = swy_transport_set_arm(s->p.transports, fds, SWY_TRANSPORT_MAX);
    int job_failure_seen = s->job_failure_seen;
    pthread_mutex_unlock(&s->lock);
    if (n < 0) {
        sched_yield();
        return;
    }
    struct pollfd pfds[SWY_TRANSPORT_MAX + 3];
    for (int i = 0; i < n; i++)
        pfds[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    /* The job's failure fd stays readable once written: after it was
     * acted on (split views may live on) only the scoped one counts. */
    if (s->p.boot != NULL && !job_failure_seen)
        pfds[n++] = (struct pollfd){.fd = swy_boot_failure_fd(s->p.boot),
                                    .events = POLLIN};
    if (s->p.boot != NULL)
        pfds[n++] = (struct pollfd){
            .fd = swy_boot_comm_failure_fd(s->p.boot), .events = POLLIN};
    if (s->wake_fd >= 0)
        pfds[n++] = (struct pollfd){.fd = s->wake_fd, .events = POLLIN};
    poll(pfds, (nfds_t)n, max_ms);
    uint64_t count;
    if (s->wake_fd >= 0 && read(s->wake_fd, &count, sizeof(count)) < 0)
        (void)0; /* nothing to drain */
}

/* The progress thread covers the time nobody waits (so sends leave while
 * the application computes). It never spins: ranks often outnumber cores,
 * and a spinning thread steals the core a peer needs to copy our data.
 * After a pass with nothing to do it sleeps on the transports' event fds,
 * the control plane and the wake fd (briefly while ops are in flight,
 * long when idle), so an idle rank burns no CPU. While a caller waits,
 * the caller drives progress and the thread parks (thread_park). */

void *swy_sched_progress_thread_main(void *arg)
{
    swy_sched_t *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        while (!s->stop) {
            if (s->waiters > 0) {
                thread_park(s, PARK_NS);
                continue;
            }
            uint64_t now = swy_time_ns();
            uint64_t handoff = s->last_wait_end_ns + HANDOFF_GRACE_NS;
            if (now >= handoff)
                break;
            thread_park(s, handoff - now);
        }
        if (s->stop) {
            pthread_mutex_unlock(&s->lock);
            return NULL;
        }
        int events = swy_sched_progress_locked(s);
        int busy = !swy_list_empty(&s->ops);
        pthread_mutex_unlock(&s->lock);
        if (events == 0)
            sleep_on_events(s, busy ? 5 : 500);
    }
}

void swy_sched_stop(swy_sched_t *s)
{
    if (s == NULL || !s->threaded)
        return;
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    thread_unpark(s);
    pthread_mutex_unlock(&s->lock);
    wake_progress(s);
    pthread_join(s->thread, NULL);
    s->threaded = 0;
}

static void wait_polling(swy_sched_t *s, int (*done)(void *), void *arg,
                         double give_up);

/* A waiting caller drives progress itself, even with a progress thread:
 * the thread stands aside while anyone waits (s->waiters), so completions
 * need no hand-off between threads — which matters when ranks outnumber
 * cores. The thread covers the time nobody waits (compute overlap). */
void swy_sched_wait_until(swy_sched_t *s, int (*done)(void *), void *arg,
                          double give_up)
{
    pthread_mutex_lock(&s->lock);
    s->waiters++;
    pthread_mutex_unlock(&s->lock);
    wait_polling(s, done, arg, give_up);
    pthread_mutex_lock(&s->lock);
    if (--s->waiters == 0) {
        s->last_wait_end_ns = swy_time_ns();
        /* Ops left in flight are the thread's after the grace: have it
         * look then rather than at its next look (PARK_NS). */
        if (s->threaded && !swy_list_empty(&s->ops))
            arm_handoff(s);
    }
    pthread_mutex_unlock(&s->lock);
}

static void wait_polling(swy_sched_t *s, int (*done)(void *), void *arg,
                         double give_up)
{
    double spin_until = -1.0; /* from the first pass's clock */
    for (;;) {
        pthread_mutex_lock(&s->lock);
        int events = swy_sched_progress_locked(s);
        int finished = done(arg);
        double now = (double)s->now_ns * 1e-9;
        pthread_mutex_unlock(&s->lock);
        if (finished)
            return;
        if (now >= give_up)
            return;
        if (spin_until < 0.0)
            spin_until = now + s->p.spin_s;
        if (events > 0) {
            spin_until = now + s->p.spin_s;
            continue;
        }
        if (now < spin_until) {
            sched_yield();
            continue;
        }
        sleep_on_events(s, 50);
        spin_until = swy_time_s() + s->p.spin_s / 4;
    }
}

static int comm_idle(void *arg)
{
    swy_sched_comm_t *c = arg;
    return swy_list_empty(&c->ops) || c->failed != SWY_OK;
}

swy_status_t swy_sched_drain(swy_sched_comm_t *c, double timeout_s)
{
    swy_sched_t *s = c->sched;
    swy_sched_wait_until(s, comm_idle, c, swy_time_s() + timeout_s);
    pthread_mutex_lock(&s->lock);
    swy_status_t status = c->failed;
    if (status != SWY_OK)
        swy_err_store(c->failmsg);
    else if (!swy_list_empty(&c->ops))
        status = swy_err_set(SWY_ERR_TIMEOUT, "sched", "operations still in "
                             "flight after %.0f s", timeout_s);
    pthread_mutex_unlock(&s->lock);
    return status;
}
