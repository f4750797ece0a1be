//! The controller's run: the kind's reflector, the triggers (its objects, ManagedCluster
//! changes, the agents' reports, the kind's own), and the reconcile loop.

use super::*;

/// Re-check every object this often even without events.
pub const RESYNC: Duration = Duration::from_secs(300);
/// Events a kind's shared reflector buffers for its controller.
pub(super) const EVENT_BUFFER: usize = 1024;

/// The object a watch event is about, and whether it is gone.
pub fn changed<K>(event: &Result<watcher::Event<K>, watcher::Error>) -> Option<(&K, bool)> {
    match event {
        Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => Some((o, false)),
        Ok(watcher::Event::Delete(o)) => Some((o, true)),
        _ => None,
    }
}

/// Sends every object of `objects` to `trigger` whenever the field claims change (and once
/// they are ready): a task for the `start` of a kind that [`PlacementKind::READS_FIELD_CLAIMS`].
pub fn trigger_on_claims<K: PlacementKind>(
    ctx: &ControllerContext,
    objects: Reflector<Watched<K>>,
    trigger: Trigger<K>,
) -> impl Future<Output = ()> + Send + 'static {
    let mut changes = ctx.field_owners.subscribe();
    async move {
        while changes.changed().await.is_ok() {
            trigger_all(&objects, &trigger);
        }
    }
}

/// Sends every object of `store` to `trigger`.
pub fn trigger_all<T>(store: &Reflector<T>, trigger: &mpsc::UnboundedSender<ObjectRef<T>>)
where
    T: Resource<DynamicType = ()> + Clone + 'static,
{
    for o in store.state() {
        let _ = trigger.send(ObjectRef::from_obj(&*o));
    }
}

/// What the cleanup task is told.
enum Cleanup {
    /// This object is gone.
    Gone(String, String),
    /// The objects were (re)listed: sweep every record without an object.
    Sweep,
}

/// Runs kind `K`'s controller until it fails; `clusters` is its subscription to the shared
/// ManagedCluster reflector, and `listed` is told once its objects (and whatever the kind
/// watches) are listed.
pub async fn run<K: PlacementKind>(
    ctx: Arc<ControllerContext>,
    clusters: ClusterEvents,
    listed: Listed,
    options: K::Options,
) -> Result<(), ControllerError> {
    let (objects, writer) = reflector::store_shared::<Watched<K>>(EVENT_BUFFER);
    let subscription = writer
        .subscribe()
        .ok_or(ControllerError::Ended(K::CONTROLLER))?;
    let (trigger, triggers) = mpsc::unbounded_channel::<ObjectRef<Watched<K>>>();
    let Started {
        kind,
        tasks,
        listed: kind_listed,
    } = K::start(&ctx, objects.clone(), trigger.clone(), &options);
    let placements = Arc::new(Placements::new(ctx.clone(), kind, objects.clone()));
    // Reports and ManagedCluster changes ask for reconciles through the pace (see
    // controllers::reconcile_pace); the objects' own events and the kind's triggers do not.
    let (paced, paced_triggers) = mpsc::unbounded_channel::<ObjectRef<Watched<K>>>();
    let pacing = placements
        .pace
        .clone()
        .forward(paced_triggers, trigger.clone());

    // The objects' own events: the kind sees each, and one that is gone is forgotten.
    let (cleanup, mut cleanups) = mpsc::unbounded_channel::<Cleanup>();
    let object_events = {
        let placements = placements.clone();
        let cleanup = cleanup.clone();
        accord_common::watch::watcher(
            Api::<Watched<K>>::all(ctx.kube.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect_shared(writer)
        .for_each(move |event| {
            if let Some((o, gone)) = changed(&event) {
                placements.observe(o, gone);
                if gone {
                    let _ = cleanup.send(Cleanup::Gone(
                        o.namespace().unwrap_or_default(),
                        o.name_any(),
                    ));
                }
            }
            if matches!(event, Ok(watcher::Event::InitDone)) {
                let present = placements
                    .objects
                    .state()
                    .iter()
                    .map(|o| FieldOwners::claimant(K::KIND, &object_name(&**o)))
                    .collect();
                placements.ctx.field_owners.listed(K::KIND, &present);
                let _ = cleanup.send(Cleanup::Sweep);
            }
            futures::future::ready(())
        })
    };
    let cleaning = {
        let placements = placements.clone();
        async move {
            let mut resync = tokio::time::interval(RESYNC);
            resync.tick().await;
            loop {
                let next = tokio::select! {
                    next = cleanups.recv() => next,
                    _ = resync.tick() => Some(Cleanup::Sweep),
                };
                match next {
                    Some(Cleanup::Gone(ns, name)) => {
                        if let Err(e) = placements.forget(&ns, &name).await {
                            super::super::report_error(
                                &placements.ctx.metrics,
                                &format!("{ns}/{name}"),
                                &e,
                            );
                        }
                    }
                    Some(Cleanup::Sweep) => placements.sweep().await,
                    None => return,
                }
            }
        }
    };

    // ManagedCluster changes that matter → every object that may select the cluster.
    let cluster_changes = {
        let objects = objects.clone();
        let t = paced.clone();
        let mut seen: HashMap<String, ClusterInfo> = HashMap::new();
        clusters.for_each(move |mc| {
            let name = mc.name_any();
            let info = ClusterInfo::of(&mc);
            if seen.get(&name) != Some(&info) {
                seen.insert(name.clone(), info);
                for o in objects.state() {
                    if K::may_select(&o, &name) {
                        let _ = t.send(ObjectRef::from_obj(&*o));
                    }
                }
            }
            futures::future::ready(())
        })
    };

    // Agents' reports → the object they are about.
    let report_changes = trigger_on_changes(
        ctx.statuses.subscribe(),
        ctx.store.keys().status_prefix(),
        objects.clone(),
        paced,
        |rest| {
            StatusKey::parse(rest)
                .filter(|key| key.kind == K::KIND.as_str())
                .map(|key| (key.namespace, key.name))
        },
    );

    let report_listed = {
        let objects = objects.clone();
        async move {
            if objects.wait_until_ready().await.is_ok() && kind_listed.await {
                let _ = listed.send(());
            }
            std::future::pending::<()>().await;
        }
    };
    let reconciling = Controller::for_shared_stream(subscription, objects)
        .reconcile_on(UnboundedReceiverStream::new(triggers))
        .run(
            |object, p: Arc<Placements<K>>| async move {
                let name = object_name(&*object);
                let _running = p.pace.running(ObjectRef::from_obj(&*object));
                p.ctx
                    .metrics
                    .reconciles
                    .get_or_create(&KindLabel::of(K::KIND.as_str()))
                    .inc();
                let action = p.reconcile(object).await?;
                p.ctx.succeeded(&name);
                Ok(action)
            },
            |object, error: &ReconcileError, p: Arc<Placements<K>>| {
                error_policy(&p.ctx, &object_name(&*object), error)
            },
            placements,
        )
        .for_each(trace_result);
    let kind_tasks = futures::future::select_all(
        tasks
            .into_iter()
            .chain([Box::pin(std::future::pending()) as BoxFuture<'static, ()>]),
    );
    // One task on purpose: a shared-stream subscription that finds its object already
    // deleted returns Pending without a wake-up, and the other branches' activity polls it
    // again.
    tokio::select! {
        () = reconciling => {}
        () = object_events => {}
        () = cleaning => {}
        () = cluster_changes => {}
        () = report_changes => {}
        () = report_listed => {}
        () = pacing => {}
        _ = kind_tasks => {}
    }
    Err(ControllerError::Ended(K::CONTROLLER))
}

/// Reconciles the object each changed key of an etcd cache names (`object_of` reads
/// `(namespace, name)` from the key after `prefix`), until the cache ends. Changes missed
/// because this fell behind the cache reconcile every object of `objects` (a burst of
/// reports must not leave statuses stale until the next resync).
pub async fn trigger_on_changes<T: Clone, O>(
    mut events: tokio::sync::broadcast::Receiver<crate::store::CacheEvent<T>>,
    prefix: String,
    objects: Reflector<O>,
    trigger: mpsc::UnboundedSender<ObjectRef<O>>,
    object_of: impl Fn(&str) -> Option<(&str, &str)>,
) where
    O: Resource<DynamicType = ()> + Clone + 'static,
{
    use crate::store::CacheEvent;
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match events.recv().await {
            Ok(CacheEvent::Put { key, .. } | CacheEvent::Delete { key }) => {
                if let Some((ns, name)) = object_of(key.trim_start_matches(&prefix)) {
                    let _ = trigger.send(ObjectRef::new(name).within(ns));
                }
            }
            Err(RecvError::Lagged(missed)) => {
                debug!(missed, "fell behind the cache; reconciling every object");
                trigger_all(&objects, &trigger);
            }
            Err(RecvError::Closed) => return,
        }
    }
}
